#!/usr/bin/env python3
"""PyTorch's causal SDPA, forward and backward, at the shapes of
tests/cuda_attn/test_attn_timing.cpp, on each backend PyTorch offers
(cuDNN, FlashAttention-2): the reference for cuda_attn_timing, run in the
same call. Inputs (B, H, T, D) bf16 from q, k, v slices of one packed
(B, T, 3C) tensor, as a GPT block makes them; times are the mean of 20 runs
after 3, with CUDA events.

    python3 jobs/bench/torch_attention.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from torch_timing import time_ms

SHAPES = [(16, 1024, 12, 64), (8, 1024, 32, 64), (8, 1024, 16, 128), (4, 2048, 16, 128)]
BACKENDS = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]


def main():
    torch.manual_seed(0)
    for B, T, H, D in SHAPES:
        C = H * D
        qkv = torch.randn(B, T, 3 * C, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dout = torch.randn(B, T, C, device="cuda", dtype=torch.bfloat16)
        flops_fwd = 4.0 * B * H * T * T * D / 2
        flops_bwd = 2.5 * flops_fwd
        for name, backend in BACKENDS:
            def heads(x):
                return x.view(B, T, H, D).transpose(1, 2)

            def forward():
                q, k, v = qkv.split(C, dim=2)
                return F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)

            try:
                with sdpa_kernel([backend]):
                    fwd = time_ms(lambda: forward())
                    out = forward()
                    go = dout.view(B, T, H, D).transpose(1, 2)

                    def both():
                        o = forward()
                        qkv.grad = None
                        o.backward(go)

                    total = time_ms(both)
            except RuntimeError as e:
                print(f"torch sdpa {name} B={B} T={T} H={H} D={D}: not available ({str(e).splitlines()[0]})")
                continue
            del out
            bwd = total - fwd
            print(f"torch sdpa {name} B={B} T={T} H={H} D={D}: fwd {fwd:.3f} ms ({flops_fwd / fwd * 1e-9:.1f} TFLOP/s), "
                  f"bwd {bwd:.3f} ms ({flops_bwd / bwd * 1e-9:.1f}), fwd+bwd {total:.3f} ms "
                  f"({(flops_fwd + flops_bwd) / total * 1e-9:.1f} TFLOP/s)")


if __name__ == "__main__":
    main()
