#!/usr/bin/env bash
# The command line: --help, --version, --dry-run, --steps/--log-dir/--set
# overrides, metrics.jsonl contents, bf16 storage and activation checkpointing,
# the device memory cap, the classifier's chunk bound.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
cat > c.json <<'JSON'
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 2,
 "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
 "train": {"steps": 50, "eval_interval": 3, "eval_steps": 1}}
JSON

run_np 1 --help
[ "$RC" = 0 ] && grep -q -- "--dry-run" "$WORK/out" && echo "ok: help" || fail "help"
run_np 1 --version
[ "$RC" = 0 ] && grep -q "ztrain [0-9]" "$WORK/out" && echo "ok: version" || fail "version"
run_np 2 c.json --bogus-flag
[ "$RC" = 2 ] && grep -q "bogus-flag" "$WORK/out" && echo "ok: unknown flag" || fail "unknown flag"
# --device cuda where no GPU is visible (or in a build without CUDA): a clear
# error on every rank's behalf, printed once, exit 2.
if [ ! -e /dev/nvidia0 ]; then
  expect_error device-cuda-without-gpu 2 "no CUDA device is visible|has no CUDA backend" c.json --device cuda --steps 1
fi

run_np 2 c.json --dry-run
if [ "$RC" = 0 ] && grep -q '"zero_optimization"' "$WORK/out" && grep -q "memory estimate" "$WORK/out" \
   && grep -q '"gradient_accumulation_steps": 2' "$WORK/out" && [ ! -d runs ]; then
  echo "ok: dry-run"
else
  fail "dry-run"
fi

# What a run would refuse before its first step, --dry-run refuses too; flags
# named by themselves, not by the config key they override.
expect_error dry-run-resume-without-dir 2 "--resume needs checkpoint.dir" c.json --dry-run --resume auto
expect_error dry-run-resume-missing 2 "--resume /nonexistent/step_4: no such checkpoint directory" \
  c.json --dry-run --resume /nonexistent/step_4 --set checkpoint.dir=ck --set checkpoint.interval=2
expect_error dry-run-profile-on-cpu 2 "--profile times CUDA kernels" c.json --dry-run --profile --device cpu
expect_error resume-empty 2 'command line: --resume: expected auto or a checkpoint.s step directory, found ""' \
  c.json --steps 1 --resume ""
expect_error steps-negative 2 "command line: --steps: expected a number of steps >= 1, found -1" c.json --steps -1
expect_error log-dir-empty 2 'command line: --log-dir: expected a directory name, found ""' c.json --log-dir ""
expect_error dry-run-and-estimate 2 "--dry-run and --estimate-memory both print an estimate" \
  c.json --dry-run --estimate-memory
run_np 1 c.json --estimate-memory --set checkpoint.keep_last=3
[ "$RC" = 0 ] && grep -q "checkpoint.keep_last: acts on the checkpoints" "$WORK/out" \
  && echo "ok: estimate-memory prints the config's warnings" || fail "estimate-memory warnings"

# jobs/local.sh: its arguments checked before mpirun, and a bad config ends
# at once (mpirun's long kill timeout, kept for saves, would hold it 2 minutes).
LOCAL=("$SRC/jobs/local.sh")
export BUILD_DIR; BUILD_DIR=$(dirname "$(dirname "$ZTRAIN")")
set +e
out=$("${LOCAL[@]}" two c.json 2>&1); lrc=$?
set -e
[ "$lrc" = 2 ] && echo "$out" | grep -q "NP must be a number of ranks >= 1, found 'two'" && echo "ok: local.sh NP checked" \
  || fail "local.sh two: exit $lrc: $out"
set +e
out=$("${LOCAL[@]}" 2 missing.json 2>&1); lrc=$?
set -e
[ "$lrc" = 2 ] && echo "$out" | grep -q "config 'missing.json' not found" && echo "ok: local.sh config checked" \
  || fail "local.sh missing.json: exit $lrc: $out"
echo '{"bogus": 1}' > bogus.json
t0=$SECONDS
set +e
out=$("${LOCAL[@]}" 2 bogus.json 2>&1); lrc=$?
set -e
[ "$lrc" = 2 ] && echo "$out" | grep -q "bogus: unknown key" && [ $((SECONDS - t0)) -lt 30 ] \
  && echo "ok: local.sh ends a bad config at once ($((SECONDS - t0)) s), exit 2" || fail "local.sh bogus.json: exit $lrc after $((SECONDS - t0)) s: $out"
unset BUILD_DIR

run_np 1 c.json --estimate-memory --world 4
if [ "$RC" = 0 ] && grep -q "nvme/nvme" "$WORK/out" && grep -q "activation checkpointing off" "$WORK/out"; then
  echo "ok: estimate-memory table"
else
  fail "estimate-memory"
fi

run_np 2 c.json --steps 5 --log-dir logs/a --set train.seed=7
m=logs/a/metrics.jsonl
if [ "$RC" != 0 ] || [ ! -f "$m" ]; then
  fail "run with overrides"
else
  # Printed steps 1, 2, 4 and the last (5); validation at 3 and 5.
  [ "$(grep -c '"step"' "$m")" = 5 ] || fail "expected 5 step records in $m"
  for k in step loss lr grad_norm tokens_per_s time_s; do
    grep '"step":5' "$m" | grep -q "\"$k\"" || fail "metrics lack $k"
  done
  grep '"step":3' "$m" | grep -q '"val_loss"' || fail "no val_loss at step 3"
  tail -1 "$m" | grep -q '"event":"end"' || fail "last line is not the end event"
  for t in params grads optim activations; do
    tail -1 "$m" | grep -q "\"$t\":[1-9]" || fail "end event lacks peak bytes of $t"
  done
  grep -q "step      5/5" "$WORK/out" || fail "progress line for the last step"
  echo "ok: overrides and metrics"
fi

# Model TFLOP/s per rank: tokens/s x the model's FLOPs per token (the tiny
# preset: 6 (N - wpe) + 12 L C T, docs/perf.md) over the ranks, on every
# printed step; in the step line too. No MFU on the CPU (no measured peak).
python3 - "$m" > tflops.out <<'PY'
import json, sys
L, C, T, V = 2, 64, 64, 256
n = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
fpt = 6 * (n - T * C) + 12 * L * C * T
recs = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l]
bad = [r["step"] for r in recs if abs(r["model_tflops"] - r["tokens_per_s"] * fpt / 2 / 1e12) > 1e-9 * r["model_tflops"] + 1e-15
       or "mfu" in r]
print("ok" if recs and not bad else "bad steps %s" % bad)
PY
if [ "$(cat tflops.out)" = ok ] && grep -q "step      5/5 .* tok/s | [0-9.e+-]* TFLOP/s |" "$WORK/out"; then
  echo "ok: model TFLOP/s per rank in metrics and the step line"
else
  fail "model TFLOP/s: $(cat tflops.out); $(grep 'step      5/5' "$WORK/out")"
fi

# Activation checkpointing recomputes, so fp32 losses are bit-identical.
run_np 1 c.json --steps 4 --log-dir ck0 --set steps_per_print=1
run_np 1 c.json --steps 4 --log-dir ck1 --set steps_per_print=1 --set model.activation_checkpointing=true
if [ "$(losses ck0/metrics.jsonl)" = "$(losses ck1/metrics.jsonl)" ] && [ -n "$(losses ck0/metrics.jsonl)" ]; then
  echo "ok: checkpointing gives identical losses"
else
  fail "checkpointing changes the loss: $(losses ck0/metrics.jsonl | tr '\n' ' ') vs $(losses ck1/metrics.jsonl | tr '\n' ' ')"
fi
a0=$(tail -1 ck0/metrics.jsonl | grep -o '"activations":[0-9]*' | cut -d: -f2)
a1=$(tail -1 ck1/metrics.jsonl | grep -o '"activations":[0-9]*' | cut -d: -f2)
[ "$a1" -lt "$a0" ] && echo "ok: checkpointing lowers peak activation memory ($a0 -> $a1)" \
  || fail "checkpointing did not lower activation memory ($a0 -> $a1)"

# bf16 storage trains: the loss falls and stays close to fp32.
run_np 1 c.json --steps 30 --log-dir bf --set bf16.enabled=true --set steps_per_print=1
run_np 1 c.json --steps 30 --log-dir f32 --set steps_per_print=1
if [ "$RC" = 0 ] && awk -v a="$(losses bf/metrics.jsonl | head -1)" -v b="$(losses bf/metrics.jsonl | tail -1)" \
     -v c="$(losses f32/metrics.jsonl | tail -1)" 'BEGIN { exit !(b < a - 0.5 && (b - c < 0.05 && c - b < 0.05)) }'; then
  echo "ok: bf16 trains and tracks fp32"
else
  fail "bf16: $(losses bf/metrics.jsonl | head -1) -> $(losses bf/metrics.jsonl | tail -1), fp32 $(losses f32/metrics.jsonl | tail -1)"
fi
# A rank that fails in the middle of training is reported once, with its rank,
# and the whole job ends (the other ranks are inside collectives and would
# otherwise wait forever).
export ZT_INJECT_FAULT="rank=1,step=3"
start=$(date +%s)
run_np 2 c.json --steps 50 --log-dir fault
unset ZT_INJECT_FAULT
took=$(( $(date +%s) - start ))
if [ "$RC" != 0 ] && [ "$(grep -c 'error on rank 1: .*injected fault' "$WORK/out")" = 1 ] && [ "$took" -lt 60 ]; then
  echo "ok: a failing rank aborts the job (exit $RC after ${took}s)"
else
  fail "fault on rank 1: exit $RC after ${took}s"
fi

# train.device_memory_cap_gib: the device refuses to hold more than the cap;
# the error names the allocation's tag and the estimator's figure for the
# rank, once. A cap with room to spare changes nothing but the log line.
run_np 2 c.json --steps 1 --log-dir capped --set train.device_memory_cap_gib=0.0001
if [ "$RC" = 1 ] && grep -q "out of memory on cpu: allocating .* for '[a-z]*' would pass the memory cap of 104.86 KiB" "$WORK/out" \
   && grep -q "the estimator predicts [0-9.]* [KMG]iB on the device for this rank" "$WORK/out" \
   && [ "$(grep -c 'ztrain: error' "$WORK/out")" = 1 ]; then
  echo "ok: memory cap refuses, naming the tag and the estimate"
else
  fail "memory cap of 0.0001 GiB: exit $RC"
fi
run_np 1 c.json --steps 2 --log-dir capped --set train.device_memory_cap_gib=1
[ "$RC" = 0 ] && grep -q "device memory capped at 1 GiB per rank" "$WORK/out" && [ -f capped/metrics.jsonl ] \
  && echo "ok: a cap with room trains" || fail "memory cap of 1 GiB"

# train.classifier_chunk_mib bounds the classifier's logits: the workspace
# measured follows the estimator's (within 10%) at the default (all 256 rows
# of 4,096 f32 logits, 4 MiB) and at 1 MiB (64 rows), and the losses of
# chunks of 4 rows match those of the default to summation order.
cat > cls.json <<'JSON'
{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 1,
 "model": {"n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 64, "vocab_size": 4096},
 "train": {"steps": 3, "eval_interval": 0}}
JSON
MEM_NP=1 memory_vs_estimate cls-default cls.json "workspace:workspace"
MEM_NP=1 memory_vs_estimate cls-1mib cls.json "workspace:workspace" train.classifier_chunk_mib=1
a=$(peak mem-cls-default workspace) b=$(peak mem-cls-1mib workspace)
[ -n "$a" ] && [ -n "$b" ] && [ $((a - b)) -gt $((5 * 1048576 / 2)) ] \
  && echo "ok: 1 MiB chunks hold $b B of workspace against $a B" || fail "classifier chunk: workspace '$b' against '$a'"
run_np 1 cls.json --log-dir cls-rows4 --set train.classifier_chunk_mib=0.0625
if [ "$RC" = 0 ] && paste <(losses mem-cls-default/metrics.jsonl) <(losses cls-rows4/metrics.jsonl) |
     awk 'NF == 2 { n++; d = $1 - $2; if (d < 0) d = -d; if (d > 1e-6 * $1) bad++ } END { exit !(n == 3 && bad == 0) }'; then
  echo "ok: chunks of 4 rows train as the default does"
else
  fail "classifier chunks of 4 rows: exit $RC, losses differ"
fi
expect_error classifier-chunk-zero 2 "train.classifier_chunk_mib: expected a number > 0, found 0" \
  cls.json --set train.classifier_chunk_mib=0

# An unwritable log directory is a clear error before training starts.
run_np 2 c.json --steps 2 --log-dir /dev/null/x
[ "$RC" = 2 ] && grep -q "/dev/null/x" "$WORK/out" && echo "ok: unwritable log dir" || fail "unwritable log dir"
finish
