#!/usr/bin/env python3
"""PyTorch reference of ztrain's GPT-2 for side-by-side benchmarks.

The same model as ztrain's modules (token + learned position embeddings,
pre-LayerNorm blocks, fused qkv, causal attention, GELU(tanh) MLP, final
LayerNorm, tied LM head), trained the way a PyTorch user would: bf16 autocast,
scaled_dot_product_attention (flash), fused AdamW, optionally torch.compile.

Prints one JSON line: tokens/s, MFU and peak memory.
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, d, seq, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.h = nn.ModuleList(Block(d, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") or name.endswith("mlp_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def flops_per_token(n_params, wpe, L, C, T):
    # As ztrain's gpt_flops_per_token: 6 (N - wpe) + 12 L C T (attention).
    return 6 * (n_params - wpe) + 12 * L * C * T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--peak-tflops", type=float, default=0.0, help="measured bf16 GEMM peak; 0 = measure")
    ap.add_argument("--label", default="")
    a = ap.parse_args()

    torch.manual_seed(0)
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True
    model = GPT(a.n_layer, a.n_head, a.d_model, a.seq, a.vocab).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_model = torch.compile(model) if a.compile else model
    x = torch.randint(0, a.vocab, (a.micro_batch, a.seq), device=dev)
    y = torch.randint(0, a.vocab, (a.micro_batch, a.seq), device=dev)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(a.steps):
        loss = step()
    end.record()
    torch.cuda.synchronize()
    sec = start.elapsed_time(end) / 1e3 / a.steps

    peak = a.peak_tflops
    if peak <= 0:
        n = 8192
        p = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        q = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        for _ in range(3):
            p @ q
        torch.cuda.synchronize()
        t0 = time.time()
        for _ in range(20):
            p @ q
        torch.cuda.synchronize()
        peak = 2 * n ** 3 * 20 / (time.time() - t0) / 1e12
    tokens = a.micro_batch * a.seq
    tok_s = tokens / sec
    fpt = flops_per_token(n_params, a.seq * a.d_model, a.n_layer, a.d_model, a.seq)
    print(json.dumps({"impl": "pytorch-compile" if a.compile else "pytorch-eager", "label": a.label,
                      "params": n_params, "tokens_per_s": tok_s, "step_ms": sec * 1e3,
                      "mfu": fpt * tok_s / (peak * 1e12), "peak_tflops": peak,
                      "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30, "loss": loss.item()}), flush=True)


if __name__ == "__main__":
    main()
