"""Makes the Hugging Face reference models that `zckpt import` and
`model.init_from` are tested against (tests/interop/refs/, committed; CI has
no PyTorch). Run once, by hand, where torch and transformers are installed:

    python3 tests/interop/make_hf_refs.py [OUT_DIR]   # default tests/interop/refs

Each model directory holds what `save_pretrained` wrote (config.json and
model.safetensors, or shards with model.safetensors.index.json), plus
tokens.txt (sequences of token ids, one per line, ids separated by commas)
and logits.npy (float32, (B, T, V)): transformers' logits on those tokens,
computed in float32 with eager attention from the weights as saved (a bf16
model's weights are widened to float32 first, as `zckpt import` does).

Models (tiny, random, seeded):
  gpt2        GPT2LMHeadModel, fp32, one file.
  gpt2_bf16   the same shapes saved in bfloat16.
  llama_gqa   LlamaForCausalLM, grouped-query attention (4 heads, 2 KV
              heads), Llama-3 rope scaling, untied head, fp32; config.json in
              the older form (rope_theta + rope_scaling) whatever transformers
              writes.
  llama_mqa_shards  one KV head (multi-query), tied head, saved in several
              shards (model.safetensors.index.json); config.json in the newer
              form (rope_parameters), whatever transformers writes.
  llama_bf16  llama_gqa's shapes in bfloat16, default rope.

The older and newer config forms are written by this script from the
config transformers saved (the version used is recorded in refs/VERSIONS),
so both forms are tested whichever one the installed transformers writes.
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM


def tokens_for(seed, vocab, batch, seq):
    g = np.random.default_rng(seed)
    return g.integers(0, vocab, size=(batch, seq), dtype=np.int64)


def save_logits(model, out, toks):
    model.eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(toks)).logits.float().numpy()
    np.save(os.path.join(out, "logits.npy"), logits.astype(np.float32))
    with open(os.path.join(out, "tokens.txt"), "w") as f:
        for row in toks:
            f.write(",".join(str(int(t)) for t in row) + "\n")


def rope_forms(cfg_path, form):
    """Rewrites config.json's rotary keys into the `form` ("old": rope_theta +
    rope_scaling, "new": rope_parameters), from whichever transformers wrote."""
    with open(cfg_path) as f:
        c = json.load(f)
    params = c.pop("rope_parameters", None)
    scaling = c.pop("rope_scaling", None)
    theta = c.pop("rope_theta", None)
    if params is None:
        params = dict(scaling or {"rope_type": "default"})
        if "type" in params and "rope_type" not in params:
            params["rope_type"] = params.pop("type")
        params["rope_theta"] = theta if theta is not None else 10000.0
    if form == "old":
        params = dict(params)
        c["rope_theta"] = params.pop("rope_theta", 10000.0)
        c["rope_scaling"] = None if params.get("rope_type", "default") == "default" else params
    else:
        c["rope_parameters"] = params
    with open(cfg_path, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")


def make(out, name, model, toks, bf16=False, shard=None, form=None):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    if bf16:
        model = model.to(torch.bfloat16)
    kw = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(d, safe_serialization=True, **kw)
    if form:
        rope_forms(os.path.join(d, "config.json"), form)
    # The reference is the directory as written, reloaded in float32 (a bf16
    # model's weights widen exactly; its rotary frequencies are computed
    # afresh in float32, as `model.float()` would not).
    again = type(model).from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    save_logits(again, d, toks)
    if not bf16:  # the rewritten config is the same model as the one in memory
        model.eval()
        with torch.no_grad():
            mem = model(torch.from_numpy(toks)).logits.float().numpy()
        ref = np.load(os.path.join(d, "logits.npy"))
        assert np.array_equal(mem, ref), f"{name}: reloaded model's logits differ by {np.abs(mem - ref).max()}"
    gen = os.path.join(d, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)  # not part of what is imported
    print(name, sorted(os.listdir(d)))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "refs")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)

    g = GPT2Config(vocab_size=96, n_positions=32, n_embd=64, n_layer=2, n_head=4,
                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=95, eos_token_id=95)
    g._attn_implementation = "eager"
    make(out, "gpt2", GPT2LMHeadModel(g), tokens_for(1, 96, 4, 32))
    torch.manual_seed(1)
    make(out, "gpt2_bf16", GPT2LMHeadModel(g), tokens_for(2, 96, 4, 32), bf16=True)

    def llama(seed, **kw):
        torch.manual_seed(seed)
        c = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                        num_attention_heads=4, max_position_embeddings=64, rms_norm_eps=1e-5,
                        attention_bias=False, mlp_bias=False, bos_token_id=1, eos_token_id=2, **kw)
        c._attn_implementation = "eager"
        m = LlamaForCausalLM(c)
        # The initialiser's std (0.02) makes every logit nearly equal; larger
        # weights make a comparison that can fail.
        with torch.no_grad():
            for p in m.parameters():
                if p.dim() == 2:
                    p.normal_(0.0, 0.15)
                else:
                    p.uniform_(0.5, 1.5)
        return m

    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 16}
    try:  # transformers 5: rope_parameters; 4: rope_theta + rope_scaling
        kw = {"rope_parameters": dict(llama3, rope_theta=5000.0)} if "rope_parameters" in LlamaConfig.__init__.__code__.co_varnames \
            else {"rope_theta": 5000.0, "rope_scaling": llama3}
    except AttributeError:
        kw = {"rope_theta": 5000.0, "rope_scaling": llama3}
    make(out, "llama_gqa", llama(10, num_key_value_heads=2, tie_word_embeddings=False, **kw),
         tokens_for(11, 128, 4, 48), form="old")
    make(out, "llama_mqa_shards", llama(20, num_key_value_heads=1, tie_word_embeddings=True, **kw),
         tokens_for(21, 128, 4, 24), shard="40KB", form="new")
    make(out, "llama_bf16", llama(30, num_key_value_heads=2, tie_word_embeddings=False),
         tokens_for(31, 128, 4, 24), bf16=True, form="old")
    with open(os.path.join(out, "VERSIONS"), "w") as f:
        f.write(f"torch {torch.__version__}\ntransformers {transformers.__version__}\nnumpy {np.__version__}\n")


if __name__ == "__main__":
    main()
