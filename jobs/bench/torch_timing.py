"""GPU timing shared by the PyTorch reference benchmarks in jobs/bench/."""
import torch


def time_ms(fn, warmup=3, iters=20, median=False):
    """Milliseconds a call of fn takes on the current CUDA stream, by CUDA
    events after `warmup` calls: the mean of `iters` calls timed together,
    or with median=True the median of `iters` calls timed one by one."""
    for _ in range(warmup):
        fn()
    if not median:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) / iters
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]
