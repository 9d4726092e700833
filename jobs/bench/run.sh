#!/usr/bin/env bash
# Side-by-side benchmark on one GPU: ztrain against the PyTorch reference of
# the same GPT-2 (eager and torch.compile), for GPT-2 124M (seq 1024, micro-batch
# 16), GPT-2 355M (24 layers, d 1024, micro-batch 16) and the 1.3B preset (24
# layers, d 2048, seq 1024, micro-batch 8), bf16.
# Prints tokens/s, MFU, peak memory and the ratio ztrain/PyTorch.
#
#   jobs/bench/run.sh ZTRAIN_BINARY [OUT_DIR] [models...]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ztrain=${1:?usage: jobs/bench/run.sh ZTRAIN_BINARY [OUT_DIR] [gpt2-124m gpt2-350m gpt2-1.3b]}
out=${2:-bench-out}
shift 2 || shift $#
models=${*:-gpt2-124m gpt2-1.3b}
mkdir -p "$out"
results="$out/results.jsonl"
: > "$results"
steps=${BENCH_STEPS:-30}

for m in $models; do
  case $m in
    gpt2-124m) L=12; H=12; C=768; MB=16 ;;
    gpt2-350m) L=24; H=16; C=1024; MB=16 ;;
    gpt2-1.3b) L=24; H=32; C=2048; MB=8 ;;
    *) echo "unknown model $m"; exit 2 ;;
  esac
  cfg="$out/$m.json"
  cat > "$cfg" <<JSON
{"train_micro_batch_size_per_gpu": $MB, "gradient_accumulation_steps": 1, "steps_per_print": 10,
 "gradient_clipping": 1.0, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.0003, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "model": {"preset": "$m"}, "train": {"steps": $steps, "eval_interval": 0}}
JSON
  "$ztrain" "$cfg" --device cuda --log-dir "$out/ztrain-$m" > "$out/ztrain-$m.log" 2>&1
  rc=$?
  python3 - "$out/ztrain-$m/metrics.jsonl" "$m" $L $C 1024 50257 $rc >> "$results" <<'PY'
import json, sys
path, label, L, C, T, V, rc = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7]), int(sys.argv[7])
try:
    recs = [json.loads(l) for l in open(path)]
except OSError:
    recs = []
steps = [r for r in recs if "step" in r and "tokens_per_s" in r]
end = [r for r in recs if r.get("event") == "end"]
n = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
fpt = 6 * (n - T * C) + 12 * L * C * T
print(json.dumps({"impl": "ztrain", "label": label, "params": n, "rc": rc,
                  "tokens_per_s": steps[-1]["tokens_per_s"] if steps else 0.0,
                  "flops_per_token": fpt, "loss": steps[-1]["loss"] if steps else None,
                  "peak_mem_gib": end[0]["peak_bytes"]["total"] / 2**30 if end else None}))
PY
  for mode in "" "--compile"; do
    python3 "$here/torch_gpt2.py" --n-layer $L --n-head $H --d-model $C --micro-batch $MB --label "$m" $mode \
      >> "$results" 2> "$out/torch-$m$mode.log" || echo "{\"impl\": \"pytorch$mode\", \"label\": \"$m\", \"failed\": true}" >> "$results"
  done
done

python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
peak = next((r["peak_tflops"] for r in rows if "peak_tflops" in r), None)
print(f"bf16 GEMM peak measured: {peak:.0f} TFLOP/s" if peak else "no peak measured")
print(f"{'model':<11} {'impl':<16} {'tokens/s':>10} {'MFU':>6} {'peak GiB':>9} {'ztrain/this':>11}")
for label in dict.fromkeys(r["label"] for r in rows):
    group = [r for r in rows if r["label"] == label]
    z = next((r for r in group if r["impl"] == "ztrain"), None)
    for r in group:
        tok = r.get("tokens_per_s", 0.0) or 0.0
        mfu = r.get("mfu")
        if r["impl"] == "ztrain" and peak and tok:
            mfu = r["flops_per_token"] * tok / (peak * 1e12)
        ratio = (z["tokens_per_s"] / tok) if (z and tok and r is not z) else None
        mem = r.get("peak_mem_gib")
        print(f"{label:<11} {r['impl']:<16} {tok:>10.0f} {(mfu or 0) * 100:>5.1f}% "
              f"{(mem or 0):>9.2f} {('%.2f' % ratio) if ratio else '':>11}")
PY
