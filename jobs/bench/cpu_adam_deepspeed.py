"""DeepSpeed's CPU Adam beside zbench_host: parameters/s of deepspeed.ops.adam.DeepSpeedCPUAdam
(adamw_mode=True, the optimizer of ZeRO-Offload) on one flat fp32 parameter of --numel elements, with
fp32 grad, exp_avg and exp_avg_sq: 28 bytes moved per parameter, as zbench_host counts its AdamW.

Usage (on the GPU host, after `source <ds folder>/env.sh` from shared/bench/ds, which installs the
DeepSpeed 0.19 wheels; the cpu_adam op JIT-builds on first use, needing ninja and g++):
  python3 cpu_adam_deepspeed.py [--numel 400000000] [--rounds 10] [--threads 16] [--copy none,bf16]

--threads sets torch.set_num_threads, which is also the OpenMP thread count of DeepSpeed's op (same
libgomp, same calling thread); 0 keeps torch's default. Pin as for zbench_host (OMP_PROC_BIND=close
OMP_PLACES=cores) for comparable numbers.

--copy bf16: DeepSpeed 0.19's DeepSpeedCPUAdam.step() no longer takes fp16_param_groups (the fused
update-and-copy of older releases), so a fused fp32 -> bf16 copy is not measured (reported as skipped).
Instead the script times step() followed by a separate torch copy of the fp32 parameter into a bf16 CPU
tensor, the extra pass ZeRO-Offload makes after the step; ztrain writes the copy in the update's pass.

One warm-up step (it allocates and zeroes the moments) precedes --rounds timed steps; the best round
counts, the mean is reported too. Prints one line per measurement and a final 'RESULT {json}'.

Measured on the H200 host (16 cores, OMP_PROC_BIND=close OMP_PLACES=cores, --threads 16, 400M, 2026-12-02):
DeepSpeed 0.19.8 4.20 G params/s (118 GB/s); step + bf16 copy 3.11 G/s. zbench_host in the same call:
ztrain's AdamW 4.34 G/s (AVX-512, no copy), 3.90 G/s with the bf16 copy in the same pass.
"""
import argparse
import inspect
import json
import os
import statistics
import sys
import time
import traceback

p = argparse.ArgumentParser()
p.add_argument('--numel', type=int, default=400_000_000, help='parameters (fp32 elements)')
p.add_argument('--rounds', type=int, default=10, help='timed steps after one warm-up step')
p.add_argument('--threads', type=int, default=0, help='torch.set_num_threads (0: torch default)')
p.add_argument('--copy', default='none,bf16', help='comma list of none, bf16')
p.add_argument('--lr', type=float, default=1e-4)
p.add_argument('--weight-decay', type=float, default=0.1)
a = p.parse_args()
copies = [c for c in a.copy.split(',') if c]
for c in copies:
    if c not in ('none', 'bf16'):
        sys.exit(f'--copy: unknown copy {c!r} (none, bf16)')

GB = 1e-9
result = {'numel': a.numel, 'rounds': a.rounds, 'omp_proc_bind': os.environ.get('OMP_PROC_BIND', ''),
          'omp_places': os.environ.get('OMP_PLACES', '')}


def finish(rc):
    print('RESULT ' + json.dumps(result), flush=True)
    sys.exit(rc)


def timed(fn, rounds):
    fn()  # warm-up
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.mean(times)


def report(name, best, mean, bytes_per_param):
    n = a.numel
    entry = {'best_s': best, 'mean_s': mean, 'params_per_s': n / best, 'params_per_s_mean': n / mean,
             'gbps': bytes_per_param * n / best * GB, 'bytes_per_param': bytes_per_param}
    print(f'{name:<24}: {best:8.3f} s best, {mean:8.3f} s mean, {n / best * 1e-9:7.3f} Gparam/s, '
          f'{entry["gbps"]:7.1f} GB/s ({bytes_per_param} B/param)', flush=True)
    return entry


try:
    import torch
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    result['threads'] = torch.get_num_threads()
    result['torch'] = torch.__version__
    import deepspeed
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    result['deepspeed'] = deepspeed.__version__
except Exception as e:  # noqa: BLE001 - report whatever stops the import
    traceback.print_exc()
    result['error'] = f'import failed: {type(e).__name__}: {e}'
    finish(1)

print(f'cpu_adam_deepspeed: deepspeed {result["deepspeed"]}, torch {result["torch"]}, '
      f'{result["threads"]} threads, numel {a.numel}, {a.rounds} rounds', flush=True)

try:
    gen = torch.Generator().manual_seed(0)
    w = torch.nn.Parameter(torch.empty(a.numel, dtype=torch.float32))
    with torch.no_grad():
        w.uniform_(-0.02, 0.02, generator=gen)
    w.grad = torch.empty(a.numel, dtype=torch.float32).uniform_(-1e-3, 1e-3, generator=gen)
    t0 = time.perf_counter()
    opt = DeepSpeedCPUAdam([w], lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=a.weight_decay,
                           adamw_mode=True)
    result['op_load_s'] = time.perf_counter() - t0
except Exception as e:  # noqa: BLE001 - the JIT build or the allocation
    traceback.print_exc()
    result['error'] = f'DeepSpeedCPUAdam failed: {type(e).__name__}: {e}'
    finish(1)

try:
    if 'none' in copies:
        best, mean = timed(opt.step, a.rounds)
        result['cpu_adam'] = report('DeepSpeedCPUAdam', best, mean, 28)
    if 'bf16' in copies:
        if 'fp16_param_groups' in inspect.signature(opt.step).parameters:
            result['bf16_copy_fused'] = 'skipped: fp16_param_groups copies to a GPU tensor, not measured here'
        else:
            result['bf16_copy_fused'] = ('skipped: DeepSpeedCPUAdam.step() of this DeepSpeed has no fused '
                                         'low-precision copy (no fp16_param_groups)')
        print(f'bf16 fused copy          : {result["bf16_copy_fused"]}', flush=True)
        w16 = torch.empty(a.numel, dtype=torch.bfloat16)

        def step_then_copy():
            opt.step()
            w16.copy_(w.detach())

        best, mean = timed(step_then_copy, a.rounds)
        result['cpu_adam_then_bf16_copy'] = report('step + torch bf16 copy', best, mean, 28 + 4 + 2)
        cbest, cmean = timed(lambda: w16.copy_(w.detach()), a.rounds)
        result['bf16_copy_alone'] = report('torch bf16 copy alone', cbest, cmean, 4 + 2)
except Exception as e:  # noqa: BLE001
    traceback.print_exc()
    result['error'] = f'step failed: {type(e).__name__}: {e}'
    finish(1)

finish(0)
