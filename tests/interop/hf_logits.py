"""Loads a `zckpt export` directory in Hugging Face transformers
(AutoModelForCausalLM: GPT2LMHeadModel or LlamaForCausalLM, as its config.json
says) and compares its logits with those `zckpt logits` wrote for the same
tokens.

usage: hf_logits.py EXPORT_DIR ZTRAIN_LOGITS.npy TOKENS_FILE DTYPE(f32|bf16)

Exit 0 when the logits agree within the tolerance of DTYPE, 1 otherwise,
77 when torch, transformers or numpy is missing (CTest's skip code).

Tolerances, as a fraction of the largest |logit| from ztrain:
  f32 export run in fp32: max |difference| <= 1e-5 (both sides compute in
    fp32; only the order of additions differs).
  bf16 export run in bf16: max |difference| <= 3e-2 and mean <= 5e-3, and
    the arg-max token agrees at >= 95% of positions. bf16 keeps 8 significant
    bits (relative rounding 2^-9 = 2e-3 per value); HF also computes
    activations in bf16 through every layer while ztrain's reference is fp32,
    so errors of a few roundings accumulate.
"""
import sys

try:
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM
except ImportError as e:  # not installed here: skip
    print(f"skip: {e}")
    sys.exit(77)


def main():
    export_dir, npy, tokens_file, dtype = sys.argv[1:5]
    ref = np.load(npy).astype(np.float64)
    with open(tokens_file) as f:
        ids = [[int(t) for t in line.replace(",", " ").split()] for line in f if line.strip()]
    tdtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]
    kw = {"output_loading_info": True, "attn_implementation": "eager"}
    try:  # transformers >= 4.56 names it dtype, older ones torch_dtype
        model, info = AutoModelForCausalLM.from_pretrained(export_dir, dtype=tdtype, **kw)
    except TypeError:
        model, info = AutoModelForCausalLM.from_pretrained(export_dir, torch_dtype=tdtype, **kw)
    problems = []
    tied = model.config.tie_word_embeddings
    # A tied LM head is the embedding; anything else missing or unexpected
    # means the export's names or shapes are wrong.
    missing = [k for k in info["missing_keys"] if not (tied and k == "lm_head.weight")]
    if missing or info["unexpected_keys"] or info["mismatched_keys"] or info.get("error_msgs"):
        problems.append(f"loading: missing {missing}, unexpected {info['unexpected_keys']}, "
                        f"mismatched {info['mismatched_keys']}, errors {info.get('error_msgs')}")
    if tied and not torch.equal(model.lm_head.weight, model.get_input_embeddings().weight):
        problems.append("lm_head is not tied to the embedding")
    model.eval()
    with torch.no_grad():
        x = torch.tensor(ids, dtype=torch.long)
        out = model(x, labels=x)
    got = out.logits.float().numpy().astype(np.float64)
    if got.shape != ref.shape:
        print(f"FAIL: HF logits shape {got.shape}, ztrain {ref.shape}")
        return 1
    scale = np.abs(ref).max()
    diff = np.abs(got - ref)
    rel_max, rel_mean = diff.max() / scale, diff.mean() / scale
    agree = float((got.argmax(-1) == ref.argmax(-1)).mean())
    # Mean next-token loss from ztrain's logits, against HF's own loss.
    lse = np.log(np.exp(ref - ref.max(-1, keepdims=True)).sum(-1)) + ref.max(-1)
    tgt = np.array(ids)[:, 1:]
    zt_loss = float((lse[:, :-1] - np.take_along_axis(ref[:, :-1], tgt[..., None], -1)[..., 0]).mean())
    hf_loss = float(out.loss)
    print(f"{dtype}: logits {ref.shape}, max|logit| {scale:.4f}, max|diff| {diff.max():.3e} "
          f"({rel_max:.2e} of max), mean {rel_mean:.2e}, arg-max agreement {agree:.4f}; "
          f"loss HF {hf_loss:.6f} vs ztrain {zt_loss:.6f}")
    if dtype == "f32":
        if rel_max > 1e-5:
            problems.append(f"max |diff| {rel_max:.2e} of max |logit| > 1e-5")
        if abs(hf_loss - zt_loss) > 1e-5 * abs(zt_loss):
            problems.append(f"loss {hf_loss} vs {zt_loss}")
    else:
        if rel_max > 3e-2 or rel_mean > 5e-3:
            problems.append(f"max |diff| {rel_max:.2e} (> 3e-2) or mean {rel_mean:.2e} (> 5e-3) of max |logit|")
        if agree < 0.95:
            problems.append(f"arg-max agreement {agree:.4f} < 0.95")
        if abs(hf_loss - zt_loss) > 2e-2 * abs(zt_loss):
            problems.append(f"loss {hf_loss} vs {zt_loss} (> 2e-2 relative)")
    for p in problems:
        print(f"FAIL: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
