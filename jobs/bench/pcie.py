"""PCIe between pinned host memory and the GPU, the offload bound's transfer term (docs/offload.md):
GB/s host-to-device, device-to-host, and both at once on two streams (what the offload step does: the
gradients land while the parameters go up). Each direction copies --gib GiB per call between a
page-locked host buffer and a device buffer; the best of --rounds calls counts, timed with CUDA events.

Usage (on the GPU host, which has PyTorch):  python3 jobs/bench/pcie.py [--gib 1] [--rounds 10]
Prints one line per measurement and a final 'RESULT {json}'.
"""
import argparse
import json

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    n = int(a.gib * 2**30)
    host_up = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    host_down = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    dev_up = torch.empty(n, dtype=torch.uint8, device="cuda")
    dev_down = torch.empty(n, dtype=torch.uint8, device="cuda")
    host_up.fill_(1)
    dev_down.fill_(2)
    s_up, s_down = torch.cuda.Stream(), torch.cuda.Stream()

    def timed(up, down):
        best = float("inf")
        for _ in range(a.rounds + 1):  # the first is a warm-up
            start = torch.cuda.Event(enable_timing=True)
            end_up, end_down = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            s_up.wait_event(start)
            s_down.wait_event(start)
            if up:
                with torch.cuda.stream(s_up):
                    dev_up.copy_(host_up, non_blocking=True)
            if down:
                with torch.cuda.stream(s_down):
                    host_down.copy_(dev_down, non_blocking=True)
            end_up.record(s_up)
            end_down.record(s_down)
            torch.cuda.synchronize()
            best = min(best, max(start.elapsed_time(end_up), start.elapsed_time(end_down)) / 1e3)
        return best

    out = {}
    for name, up, down in (("h2d", True, False), ("d2h", False, True), ("both", True, True)):
        t = timed(up, down)
        gbs = n / t / 1e9  # each direction's rate
        out[name + "_gb_s"] = round(gbs, 2)
        print(f"{name}: {n / 1e9:.2f} GB {'each way ' if name == 'both' else ''}in {t * 1e3:.1f} ms: {gbs:.1f} GB/s"
              f"{' each way' if name == 'both' else ''}")
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main()
