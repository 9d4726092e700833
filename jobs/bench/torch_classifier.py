#!/usr/bin/env python3
"""PyTorch's figures for a GPT classifier on one GPU, the reference that
ztrain's fused classifier is measured against (docs/perf.md): the three
products (logits = x w^T, dx = G w, dw = G^T x) through cuBLAS, at V and at
V rounded up to a multiple of 64 (as GPT-2 trainers pad its vocabulary:
with an odd V as the contiguous extent cuBLAS runs several times slower),
and the whole classifier forward and backward (cross-entropy of x w^T in
fp32, mean over the rows) eager and under torch.compile. bf16 inputs, timed with CUDA events,
the median of --iters calls after warm-up. Prints one line a figure and, with
--json, writes them to a file.

    python3 jobs/bench/torch_classifier.py [--n 16384] [--c 768] [--v 50257]
"""
import argparse
import json

import torch
import torch.nn.functional as F

from torch_timing import time_ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=16384, help="rows (tokens)")
    ap.add_argument("--c", type=int, default=768, help="model width")
    ap.add_argument("--v", type=int, default=50257, help="classes")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torch_classifier.py: no CUDA device")
    dev = torch.device("cuda")
    torch.manual_seed(0)
    x = torch.randn(a.n, a.c, device=dev, dtype=torch.bfloat16)
    w = (0.02 * torch.randn(a.v, a.c, device=dev)).to(torch.bfloat16)
    g = (1e-4 * torch.randn(a.n, a.v, device=dev)).to(torch.bfloat16)
    t = torch.randint(0, a.v, (a.n,), device=dev)
    flop = 2.0 * a.n * a.v * a.c

    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "n": a.n, "c": a.c, "v": a.v}
    vp = (a.v + 63) // 64 * 64
    wp = torch.zeros(vp, a.c, device=dev, dtype=torch.bfloat16)
    wp[: a.v] = w
    gp = torch.zeros(a.n, vp, device=dev, dtype=torch.bfloat16)
    gp[:, : a.v] = g
    for suffix, (wi, gi) in (("", (w, g)), ("_padded", (wp, gp))):
        res["logits" + suffix + "_ms"] = time_ms(lambda: x @ wi.t(), iters=a.iters, median=True)
        res["dx" + suffix + "_ms"] = time_ms(lambda: gi @ wi, iters=a.iters, median=True)
        res["dw" + suffix + "_ms"] = time_ms(lambda: gi.t() @ x, iters=a.iters, median=True)
        res["products" + suffix + "_ms"] = sum(res[k + suffix + "_ms"] for k in ("logits", "dx", "dw"))
    res["v_padded"] = vp
    del wp, gp

    xg = x.clone().requires_grad_(True)
    wg = w.clone().requires_grad_(True)

    def classifier(xi, wi, ti):
        return F.cross_entropy((xi @ wi.t()).float(), ti)

    def step(fn):
        xg.grad = None
        wg.grad = None
        fn(xg, wg, t).backward()

    res["eager_ms"] = time_ms(lambda: step(classifier), iters=a.iters, median=True)
    compiled = torch.compile(classifier)
    res["compile_ms"] = time_ms(lambda: step(compiled), warmup=5, iters=a.iters, median=True)

    print(f"device {res['device']}, torch {res['torch']}, N={a.n} C={a.c} V={a.v} bf16")
    for suffix, v in (("", a.v), ("_padded", vp)):
        for k in ("logits", "dx", "dw"):
            ms = res[k + suffix + "_ms"]
            print(f"product {k}, V {v}: {ms:.3f} ms ({flop / ms * 1e-9:.1f} TFLOP/s at V {a.v})")
        ms = res["products" + suffix + "_ms"]
        print(f"three products, V {v}: {ms:.3f} ms ({3 * flop / ms * 1e-9:.1f} TFLOP/s at V {a.v})")
    print(f"classifier forward and backward, eager: {res['eager_ms']:.3f} ms")
    print(f"classifier forward and backward, torch.compile: {res['compile_ms']:.3f} ms")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
