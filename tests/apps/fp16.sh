#!/usr/bin/env bash
# fp16 with DeepSpeed's dynamic loss scaler: an overflow on one rank skips the
# step on every rank and halves the scale; a clean window doubles it; an
# overflow at the minimum scale ends the run with a diagnostic naming the unit;
# fp16 training tracks fp32.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
cat > c.json <<'JSON'
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1, "gradient_clipping": 1.0,
 "fp16": {"enabled": true, "initial_scale_power": 16, "hysteresis": 1, "loss_scale_window": 3},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
 "train": {"steps": 8, "eval_interval": 0}}
JSON
scales() { grep -o '"loss_scale":[^,}]*' "$1" | cut -d: -f2 | tr '\n' ' '; }
skips() { grep -o '"skipped":[a-z]*' "$1" | cut -d: -f2 | tr '\n' ' '; }

export ZT_INJECT_FAULT="overflow:rank=1,step=3,unit=2"
run_np 2 c.json --log-dir ov
[ "$RC" = 0 ] || fail "overflow run failed"
sc=$(scales ov/metrics.jsonl)
sk=$(skips ov/metrics.jsonl)
# Steps 1-2 clean at 2^16; step 3 overflows (skipped, scale halves); three
# clean steps 4-6 at 2^15, then the scale doubles for step 7.
[ "$sc" = "65536.0 65536.0 65536.0 32768.0 32768.0 32768.0 65536.0 65536.0 " ] && echo "ok: scale halves, then doubles after the window" \
  || fail "loss scales: $sc"
[ "$sk" = "false false true false false false false false " ] && echo "ok: the overflowing step is skipped" || fail "skips: $sk"
grep -q "step 3: fp16 gradient overflow (first in unit 'h.1')" "$WORK/out" && echo "ok: overflow reported" \
  || fail "overflow not reported"

run_np 2 c.json --log-dir minscale --set fp16.min_loss_scale=65536
unset ZT_INJECT_FAULT
if [ "$RC" = 1 ] && [ "$(grep -c "ztrain: error: fp16: gradients overflow at the minimum loss scale.*unit 'h.1'" "$WORK/out")" = 1 ]; then
  echo "ok: overflow at the minimum scale ends the run with the diagnostic"
else
  fail "minimum-scale overflow: exit $RC"
fi

# fp16 training falls like fp32.
run_np 1 c.json --steps 30 --log-dir h
run_np 1 c.json --steps 30 --log-dir f --set fp16.enabled=false
if awk -v a="$(losses h/metrics.jsonl | head -1)" -v b="$(losses h/metrics.jsonl | tail -1)" \
     -v c="$(losses f/metrics.jsonl | tail -1)" 'BEGIN { exit !(b < a - 0.5 && b - c < 0.05 && c - b < 0.05) }'; then
  echo "ok: fp16 trains and tracks fp32"
else
  fail "fp16 $(losses h/metrics.jsonl | head -1) -> $(losses h/metrics.jsonl | tail -1), fp32 $(losses f/metrics.jsonl | tail -1)"
fi
finish
