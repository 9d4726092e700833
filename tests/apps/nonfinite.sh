#!/usr/bin/env bash
# Non-finite steps ([Note: non-finite steps] in src/train/grad_finalize.cpp):
#  - a diverging run (learning rate 1e30: NaN loss and gradient norm from
#    step 2 on) stops at the first non-finite step with exit 1 and a message
#    naming train.nonfinite_tolerance, in fp32 and bf16, and saves nothing of it;
#  - one non-finite step (an injected inf gradient) is skipped and the run
#    goes on within train.nonfinite_tolerance; fp16's overflow skips never count;
#  - a state that is already non-finite (lr 1e39 makes the weights inf in the
#    first update) is never published as a checkpoint.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
cat > c.json <<'JSON'
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 1, "steps_per_print": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
 "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "seq_len": 16, "vocab_size": 64},
 "checkpoint": {"dir": "ck", "interval": 1},
 "train": {"steps": 5, "eval_interval": 0}}
JSON
skips() { grep -o '"skipped":[a-z]*' "$1" | cut -d: -f2 | tr '\n' ' '; }

for prec in fp32 bf16; do
  rm -rf ck
  run_np 2 c.json --log-dir d$prec --set optimizer.params.lr=1e30 --set bf16.enabled=$([ $prec = bf16 ] && echo true || echo false)
  if [ "$RC" = 1 ] && grep -q "ztrain: error: step 2: the loss (.*nan) or the gradient norm (.*nan) is not finite in 1 consecutive step(s), more than train.nonfinite_tolerance (0)" "$WORK/out" \
     && [ "$(grep -c 'ztrain: error' "$WORK/out")" = 1 ] && [ -d ck/step_1 ] && [ ! -e ck/step_2 ] && [ "$(cat ck/latest)" = step_1 ]; then
    echo "ok: $prec: a diverging run stops at step 2 and saves nothing of it"
  else
    fail "$prec divergence: exit $RC, $(ls ck 2>/dev/null | tr '\n' ' ')"
  fi
done

# One inf gradient at step 3 (rank 1): with the default tolerance 0 the run
# stops; with 1 the step is skipped (no update) and the run ends normally.
export ZT_INJECT_FAULT="overflow:rank=1,step=3,unit=2"
rm -rf ck
run_np 2 c.json --log-dir t0
[ "$RC" = 1 ] && grep -q "step 3: the loss (.*) or the gradient norm (inf) is not finite" "$WORK/out" \
  && echo "ok: tolerance 0 stops at the first non-finite step" || fail "tolerance 0: exit $RC"
rm -rf ck
run_np 2 c.json --log-dir t1 --set train.nonfinite_tolerance=1
sk=$(skips t1/metrics.jsonl)
if [ "$RC" = 0 ] && grep -q "step 3: .*is not finite: update skipped (1 in a row of train.nonfinite_tolerance 1)" "$WORK/out" \
   && [ "$(cat ck/latest)" = step_5 ]; then
  echo "ok: tolerance 1 skips the one non-finite step and goes on"
else
  fail "tolerance 1: exit $RC, skips $sk"
fi
# [Note: verdict on the device] (grad_finalize.hpp): the same run with the
# verdict read by the host before the update, and both with clipping at work
# (gradient_clipping 0.05, below every step's norm), give the same bits: the
# losses, norms and skips of every step.
fields() { grep -o '"\(loss\|grad_norm\|skipped\)":[^,}]*' "$1" | tr '\n' ' '; }
rm -rf ck
ZTRAIN_VERDICT=host run_np 2 c.json --log-dir t1h --set train.nonfinite_tolerance=1
a=$(fields t1/metrics.jsonl); b=$(fields t1h/metrics.jsonl)
[ "$RC" = 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] && echo "ok: the verdict on the device has the host's bits (a skipped step)" \
  || fail "verdict host/device: exit $RC: $a / $b"
# fp16: the same inf is an overflow the loss scaler skips; it does not count.
rm -rf ck
run_np 2 c.json --log-dir f16 --set fp16.enabled=true --set fp16.initial_scale_power=8
sk=$(skips f16/metrics.jsonl)
[ "$RC" = 0 ] && [ "$sk" = "false false true false false " ] && ! grep -q "not finite" "$WORK/out" \
  && echo "ok: fp16 overflow skips do not count as non-finite steps" || fail "fp16: exit $RC, skips $sk"
unset ZT_INJECT_FAULT
for stage in 0 3; do
  rm -rf ck
  run_np 2 c.json --log-dir c$stage --set gradient_clipping=0.05 --set zero_optimization.stage=$stage --set train.steps=4
  rm -rf ck
  ZTRAIN_VERDICT=host run_np 2 c.json --log-dir c${stage}h --set gradient_clipping=0.05 --set zero_optimization.stage=$stage --set train.steps=4
  a=$(fields c$stage/metrics.jsonl); b=$(fields c${stage}h/metrics.jsonl)
  [ "$RC" = 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] && echo "ok: stage $stage, clipped: the verdict on the device has the host's bits" \
    || fail "stage $stage clipped, verdict host/device: exit $RC: $a / $b"
done

# lr 1e39 (inf in float): the first update makes the weights non-finite;
# their save is refused, and the staging directory does not become a checkpoint.
rm -rf ck
run_np 2 c.json --log-dir inf --set optimizer.params.lr=1e39
if [ "$RC" = 1 ] && grep -q "state of unit '.*' on rank [01] holds non-finite values (the run diverged): not saved" "$WORK/out" \
   && grep -q "ztrain: error: checkpoint of step 1 failed" "$WORK/out" && [ ! -e ck/step_1 ] && [ ! -e ck/latest ]; then
  echo "ok: a non-finite state is not saved"
else
  fail "non-finite save: exit $RC, $(ls ck 2>/dev/null | tr '\n' ' ')"
fi
finish
