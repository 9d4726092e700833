#!/usr/bin/env bash
# zbench_host (apps/zbench_host.cpp): every rate it prints follows from its
# timings and the bytes each kernel moves for fp32 arrays (triad 12 and 16 B
# an element, AdamW 28 B, 30 B with a 16-bit copy, 2 B less from bf16
# gradients); every measurement asked
# for is there; bad options exit 2 naming the option.
set -euo pipefail
: "${ZBENCH_HOST:?}"
out=$("$ZBENCH_HOST" --numel 1048576 --rounds 1 --threads 2 --isa sse2 --copy none,bf16 --grad fp32,bf16 --tile 262144 \
  --pages small --touch one --aos 1024)
echo "$out" | grep -v '^RESULT '
echo "$out" | sed -n 's/^RESULT //p' | python3 -c '
import json, sys
r = json.load(sys.stdin)
n = r["numel"]
def close(got, want, what):
    assert abs(got - want) <= 1e-9 * abs(want), f"{what}: {got} != {want}"
t = r["triad"]
close(t["gbps_stream"], 12 * n / t["best_s"] / 1e9, "triad GB/s (12 B an element)")
close(t["gbps_write_allocate"], 16 * n / t["best_s"] / 1e9, "triad GB/s with write-allocate (16 B)")
want = {"none": 28, "bf16": 30}
assert sorted((a["copy"], a["grad"]) for a in r["adamw"]) == [("bf16", "bf16"), ("bf16", "fp32"), ("none", "bf16"),
                                                             ("none", "fp32")], r["adamw"]
for a in r["adamw"] + r["pattern"]:
    assert a["bytes_per_param"] == want[a["copy"]] - (2 if a.get("grad") == "bf16" else 0), a
    close(a["gbps"], a["bytes_per_param"] * n / a["best_s"] / 1e9, "AdamW GB/s")
assert [a["block"] for a in r["aos"]] == [1024], r["aos"]
for a in r["aos"]:
    close(a["adamw_gbps"], 30 * a["adamw_params_per_s"] / 1e9, "interleaved AdamW GB/s")
assert (r["tile"], r["pages"], r["touch"], r["threads"]) == (262144, "small", "one", 2), r
print("zbench_host figures consistent")
'
. "$(dirname "$0")/lib.sh"
BAD_CMD=("$ZBENCH_HOST" --numel 4096 --rounds 1)
expect_bad_options zbench_host "--aos 1000" "--aos abc" "--pages giant" "--touch two" "--tile -1" "--grad fp16" \
  "--threads -1" "--copy ," "--isa bogus"
finish
