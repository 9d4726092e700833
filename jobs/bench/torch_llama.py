#!/usr/bin/env python3
"""Hugging Face reference for ztrain's Llama: the same shapes trained the way a
transformers user would on one GPU.

transformers.LlamaForCausalLM (attn_implementation "sdpa"), fp32 parameters
under bf16 autocast, fused AdamW, gradient clipping at 1.0, optionally
torch.compile. Random token batches of (micro_batch, seq). Prints one JSON
line: tokens/s, step time, MFU against --peak, peak memory.

  python3 jobs/bench/torch_llama.py --layers 16 --dim 2048 --heads 32 --kv-heads 8 \\
      --ffn 8192 --vocab 128256 --seq 2048 --micro-batch 4 [--compile] [--tie]
"""
import argparse
import json
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--ffn", type=int, default=8192)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--rope-theta", type=float, default=500000.0)
    p.add_argument("--tie", action="store_true", help="tie_word_embeddings")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--peak", type=float, default=0.0, help="bf16 peak FLOP/s for the MFU column")
    p.add_argument("--label", default="llama")
    a = p.parse_args()

    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.dim, intermediate_size=a.ffn, num_hidden_layers=a.layers,
                      num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, max_position_embeddings=a.seq,
                      rope_theta=a.rope_theta, tie_word_embeddings=a.tie, attention_bias=False, mlp_bias=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    dev = "cuda"
    model = LlamaForCausalLM(cfg).to(dev)
    model.train()
    n_params = sum(q.numel() for q in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    fwd = torch.compile(model) if a.compile else model
    torch.backends.cuda.matmul.allow_tf32 = True

    def step():
        idx = torch.randint(0, a.vocab, (a.micro_batch, a.seq), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(input_ids=idx, labels=idx).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / a.steps
    tokens = a.micro_batch * a.seq / dt
    emb = a.vocab * a.dim
    # 6 N per token for the matrices (the embedding lookup is not a product;
    # the head is, tied or not) + causal attention 6 L T d (half of 12 L T d).
    flops_tok = 6 * (n_params - emb + (emb if a.tie else 0)) + 6 * a.layers * a.seq * a.dim
    print(json.dumps({"impl": "transformers" + ("-compile" if a.compile else ""), "label": a.label,
                      "params": n_params, "tokens_per_s": tokens, "step_ms": dt * 1e3,
                      "flops_per_token": flops_tok,
                      "mfu": tokens * flops_tok / a.peak if a.peak else None,
                      "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30, "loss": loss.item()}))


if __name__ == "__main__":
    main()
