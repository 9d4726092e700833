#!/usr/bin/env bash
# offload.grad_dtype "bf16" ([Note: bf16 gradients on the host] in
# src/zero/grad_landing.hpp), on the CPU backend:
#  - the rounding happens once, after the fp32 reduction: runs give the same
#    loss, gradient-norm and validation-loss bits at ZeRO stages 1-3, with
#    the optimizer on the CPU or NVMe, the parameters offloaded or made from
#    the master, the gradient landing in one piece or many, the checkpoints
#    in host memory (the capped layout of docs/offload.md), at one rank count;
#  - they differ from the fp32 gradients of the same layout (the key does
#    something) by the rounding only;
#  - the delayed update (CPU and NVMe), fp16 and resume work with it;
#  - the host keeps 2 bytes per owned parameter less, as the estimator says;
#  - what cannot round once is refused by name.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
cp "$SRC/tests/apps/offload_small.json" c.json

CPU='zero_optimization.offload_optimizer.device="cpu"'
G='offload.grad_dtype="bf16"'
BIG=zero_optimization.reduce_bucket_size=100000000
PARAMS='zero_optimization.offload_param.device="cpu" zero_optimization.offload_param.buffer_size=8000'
NVME="zero_optimization.offload_optimizer.device=\"nvme\" zero_optimization.offload_optimizer.nvme_path=\"$WORK/swap\""
mkdir -p swap

# alike NP NAME "SETTINGS" NAME "SETTINGS"...: every run (bf16, the key on)
# gives the first one's bits.
alike() {
  local np=$1 first="" name sets s
  shift
  while [ $# -gt 0 ]; do
    name=$1 sets=$2
    shift 2
    local args=()
    set -f
    for s in $sets; do args+=(--set "$s"); done
    set +f
    run_np "$np" c.json --log-dir "$name" --set bf16.enabled=true --set "$G" "${args[@]}"
    [ "$RC" = 0 ] || { fail "$name: exit $RC"; continue; }
    bits "$name" > "$name.txt"
    if [ -z "$first" ]; then
      first=$name
      [ -s "$name.txt" ] || fail "$name: no step reported"
    elif cmp -s "$first.txt" "$name.txt"; then
      echo "ok: $name has the bits of $first"
    else
      fail "$name: bits differ from $first"
      diff "$first.txt" "$name.txt" | head -4
    fi
  done
}

alike 2 z2 "zero_optimization.stage=2 train.breadth_first_group=3 $CPU $BIG" \
  z3 "zero_optimization.stage=3 train.breadth_first_group=3 $CPU $BIG" \
  z1 "zero_optimization.stage=1 $CPU $BIG" \
  z2-pieces "zero_optimization.stage=2 train.breadth_first_group=3 $CPU" \
  z3-params "zero_optimization.stage=3 train.breadth_first_group=3 $CPU $PARAMS $BIG" \
  z3-master "zero_optimization.stage=3 train.breadth_first_group=3 $CPU $PARAMS offload.param_from_master=true $BIG" \
  z2-nvme "zero_optimization.stage=2 train.breadth_first_group=3 $NVME $BIG" \
  z3-nvme-pieces "zero_optimization.stage=3 train.breadth_first_group=3 $NVME" \
  z3-ckpt-host "zero_optimization.stage=3 train.breadth_first_group=3 $CPU $PARAMS offload.param_from_master=true $BIG model.activation_checkpointing=true activation_checkpointing.cpu_checkpointing=true"
alike 1 np1-z1 "zero_optimization.stage=1 $CPU $BIG" \
  np1-z3-params "zero_optimization.stage=3 train.breadth_first_group=6 $CPU $PARAMS $BIG"
alike 3 np3-z2 "zero_optimization.stage=2 train.breadth_first_group=2 $CPU $BIG" \
  np3-z3 "zero_optimization.stage=3 train.breadth_first_group=2 $CPU"
# The device's accumulator adds the micro-batches in the walk's order, not
# the group's: its own class.
alike 2 acc-z2 "zero_optimization.stage=2 offload.grad_accumulation=\"device\" $CPU $BIG" \
  acc-z3 "zero_optimization.stage=3 offload.grad_accumulation=\"device\" $CPU"

# Against fp32 gradients in the same layout (which has the bits of no
# offload, tests/apps/offload.sh): the norm differs from the first step, the
# loss by the rounding's effect only.
run_with 2 c.json f32 bf16.enabled=true zero_optimization.stage=2 train.breadth_first_group=3 "$CPU" "$BIG"
bits f32 > f32.txt
n1=$(field z2/metrics.jsonl grad_norm) n0=$(field f32/metrics.jsonl grad_norm)
l1=$(losses z2/metrics.jsonl | tail -1) l0=$(losses f32/metrics.jsonl | tail -1)
if [ "$RC" = 0 ] && ! cmp -s f32.txt z2.txt &&
   [ "$(head -1 f32.txt | grep -o 'grad_norm[^ ]*')" != "$(head -1 z2.txt | grep -o 'grad_norm[^ ]*')" ] &&
   awk -v a="$l1" -v b="$l0" -v m="$n1" -v n="$n0" \
     'BEGIN { d = (a - b) / b; e = (m - n) / n; exit !(d < 1e-3 && d > -1e-3 && e < 1e-2 && e > -1e-2) }'; then
  echo "ok: bf16 gradients: step 5 loss $l1 (fp32 gradients $l0), norm $n1 ($n0)"
else
  fail "bf16 gradients against fp32: loss $l1 vs $l0, norm $n1 vs $n0 (exit $RC)"
fi

# The delayed update (two host gradient buffers) and fp16 with loss scaling.
DEL="offload.delayed_update=true offload.delayed_update_warmup=2 train.steps=8 train.eval_interval=4"
alike 2 delayed-z2 "zero_optimization.stage=2 train.breadth_first_group=3 $CPU $DEL $BIG" \
  delayed-z3 "zero_optimization.stage=3 train.breadth_first_group=3 $CPU $DEL" \
  delayed-z2-nvme "zero_optimization.stage=2 train.breadth_first_group=3 $NVME $DEL"
for s in 2 3; do
  run_with 2 c.json fp16-z$s fp16.enabled=true fp16.initial_scale_power=12 zero_optimization.stage=$s \
    train.breadth_first_group=3 "$CPU" "$G"
  [ "$RC" = 0 ] || fail "fp16 at stage $s: exit $RC"
  bits fp16-z$s > fp16-z$s.txt
done
if [ "$(wc -l < fp16-z2.txt)" = 5 ] && cmp -s fp16-z2.txt fp16-z3.txt && ! grep -q -i nan fp16-z2.txt; then
  echo "ok: fp16 with bf16 gradients: stage 3 has the bits of stage 2"
else
  fail "fp16 with bf16 gradients: $(tail -1 fp16-z2.txt) vs $(tail -1 fp16-z3.txt)"
fi

# Resume: 10 steps straight equal 5 saved and 5 resumed.
R=(--set bf16.enabled=true --set zero_optimization.stage=3 --set train.breadth_first_group=3 --set "$CPU" --set "$G"
   --set train.steps=10 --set train.eval_interval=0)
run_np 2 c.json --log-dir straight "${R[@]}"
losses straight/metrics.jsonl | tail -5 > x
run_np 2 c.json --log-dir first "${R[@]}" --set 'checkpoint.dir="ck"' --steps 5
run_np 2 c.json --log-dir second "${R[@]}" --set 'checkpoint.dir="ck"' --resume auto
losses second/metrics.jsonl > y
if [ "$RC" = 0 ] && grep -q "resumed from ck/step_5" "$WORK/out" && [ -s x ] && cmp -s x y; then
  echo "ok: bf16 gradients: resumed at step 5, bit-exact"
else
  fail "bf16 gradients: resume (exit $RC): $(tr '\n' ' ' < x) vs $(tr '\n' ' ' < y)"
fi

# The start line says where the gradients go.
run_np 2 c.json --log-dir startline --set bf16.enabled=true --set zero_optimization.stage=2 \
  --set train.breadth_first_group=3 --set "$CPU" --set "$G" --steps 1
if [ "$RC" = 0 ] && grep -q "ZeRO stage 2, optimizer on cpu, gradients to the host in bf16;" "$WORK/out"; then
  echo "ok: the start line says the gradients go to the host in bf16"
else
  fail "the start line: $(grep '^batch' "$WORK/out")"
fi

# Host memory: measured against the estimator, and 2 bytes per owned
# parameter less than with fp32 gradients.
cp "$SRC/tests/apps/offload_memory.json" m.json
TAGS="params:parameters (working;grads:gradients (fp32);optim:optimizer (master;pinned:pinned host memory;pageable:pageable host memory;comm:communication buckets;total:device total"
PIN=zero_optimization.offload_optimizer.pin_memory=true
memory_vs_estimate stage2-bf16 m.json "$TAGS" zero_optimization.stage=2 "$PIN" "$G"
memory_vs_estimate stage3-master-bf16 m.json "$TAGS" zero_optimization.stage=3 "$PIN" \
  'zero_optimization.offload_param.device="cpu"' zero_optimization.offload_param.pin_memory=true \
  offload.param_from_master=true "$G"
# One rank in the layout of the capped runs (docs/offload.md): ZeRO-3 with
# both offloads, parameters from the master, overlap_comm, one breadth-first
# group of the step's micro-batches with the checkpoints in host memory.
# Also the gradient buffers (one unit's and the tied owner's: one rank's
# reductions finish at once), the communication staging (the upload
# buffers of the gathers in flight, the pieces landing) and the total.
MEM_NP=1 memory_vs_estimate one-rank-group-bf16 m.json \
  "grads:gradients (fp32);comm:communication buckets;total:device total;pinned:pinned host memory" \
  zero_optimization.stage=3 zero_optimization.overlap_comm=true "$PIN" 'zero_optimization.offload_param.device="cpu"' \
  zero_optimization.offload_param.pin_memory=true offload.param_from_master=true "$G" gradient_accumulation_steps=2 \
  train.breadth_first_group=2 model.activation_checkpointing=true activation_checkpointing.cpu_checkpointing=true
# The same with units kept gathered for their reuse (as DeepSpeed's default
# distance keeps a model under 1e9 parameters): the forward's last units and,
# after its backward, every unit (the next micro-batch's forward comes after
# the other units): the whole model is gathered at the end of the backward,
# during the embedding's reduction, where a replay that freed each unit after
# its backward estimated 0.42 MiB of parameters against 0.80 measured and a
# total 31% short.
MEM_NP=1 memory_vs_estimate one-rank-group-reuse m.json \
  "params:parameters (working;grads:gradients (fp32);comm:communication buckets;total:device total" \
  zero_optimization.stage=3 zero_optimization.overlap_comm=true "$PIN" 'zero_optimization.offload_param.device="cpu"' \
  zero_optimization.offload_param.pin_memory=true offload.param_from_master=true "$G" gradient_accumulation_steps=2 \
  train.breadth_first_group=2 model.activation_checkpointing=true activation_checkpointing.cpu_checkpointing=true \
  zero_optimization.stage3_max_reuse_distance=400000
run_np 2 m.json --log-dir mem-stage2-f32 --set zero_optimization.stage=2 --set "$PIN"
pinned_saves mem-stage2-f32 mem-stage2-bf16 m.json "fp32 against bf16 gradients"

expect_error "bf16 gradients without the optimizer offloaded" 2 \
  "offload.grad_dtype: \"bf16\" is the dtype of the gradients that land on the host .* device \"none\"" c.json \
  --set zero_optimization.stage=2 --set "$G"
expect_error "bf16 gradients with part of the optimizer on the device" 2 \
  "offload.grad_dtype: .* ratio 0.5" c.json --set zero_optimization.stage=3 --set "$CPU" \
  --set zero_optimization.offload_optimizer.ratio=0.5 --set "$G"
expect_error "bf16 gradients with a pipeline" 2 "offload.grad_dtype: \"bf16\" with pipeline.parallel_size 2" c.json \
  --set zero_optimization.stage=2 --set "$CPU" --set pipeline.parallel_size=2 --set "$G"
expect_error "bf16 gradients landing three times a step" 2 \
  "offload.grad_dtype \"bf16\" rounds each gradient once.* 3 micro-batches per rank in breadth-first groups of 1 lands it 3 times" \
  c.json --set zero_optimization.stage=2 --set "$CPU" --set "$G"
expect_error "an unknown gradient dtype" 2 'offload.grad_dtype: expected one of "fp32", "bf16", found "fp16"' c.json \
  --set zero_optimization.stage=2 --set "$CPU" --set 'offload.grad_dtype="fp16"'
finish
