#!/usr/bin/env bash
# ZeRO-Offload end to end (docs/offload.md), on the CPU backend, where the
# offloaded states live in host buffers apart from the "device" ones and move
# through the same copies as on a GPU:
#  - every ZeRO stage 1-3 x optimizer offload x ranks 1-3 gives the same loss,
#    gradient-norm and validation-loss bits as the same run without offload
#    (the host AdamW is the device AdamW's arithmetic), also in bf16 and fp16,
#    with ratio < 1 (part of the states kept on the device) and unpinned;
#  - a checkpoint saved with one offload mode resumes in another and goes on
#    bit-exactly;
#  - offload keys with a stage that does not use them are refused by name.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
cp "$SRC/tests/apps/offload_small.json" c.json


# same NAME NP SETTINGS... : the run with SETTINGS and the same run with
# offload_optimizer.device "cpu" give the same bits.
same() {
  local name=$1 np=$2
  shift 2
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  run_np "$np" c.json --log-dir "$name-ref" "${sets[@]}"
  [ "$RC" = 0 ] || { fail "$name: reference run exit $RC"; return; }
  bits "$name-ref" > "$name-ref.txt"
  local i=0
  for off in "${OFFLOADS[@]}"; do
    i=$((i + 1))
    local extra=()
    for s in $off; do extra+=(--set "$s"); done
    run_np "$np" c.json --log-dir "$name-off$i" "${sets[@]}" "${extra[@]}"
    [ "$RC" = 0 ] || { fail "$name [$off]: exit $RC"; continue; }
    bits "$name-off$i" > "$name-off.txt"
    if [ -s "$name-ref.txt" ] && [ "$(wc -l < "$name-ref.txt")" = 5 ] && cmp -s "$name-ref.txt" "$name-off.txt"; then
      echo "ok: $name [$off] has the bits of no offload"
    else
      fail "$name [$off]: bits differ from no offload"
      diff "$name-ref.txt" "$name-off.txt" | head -4
    fi
  done
}

OFFLOADS=('zero_optimization.offload_optimizer.device="cpu"'
          'zero_optimization.offload_optimizer.device="cpu" zero_optimization.offload_optimizer.pin_memory=true')
for stage in 1 2 3; do
  if [ $stage = 3 ]; then
    # Parameters offloaded too, through a pool of 2 buffers (fewer than the
    # units, so uploads wait for gathers to free them).
    OFFLOADS+=('zero_optimization.offload_optimizer.device="cpu" zero_optimization.offload_param.device="cpu" zero_optimization.offload_param.buffer_count=2 zero_optimization.offload_param.buffer_size=8000')
  fi
  for np in 1 2 3; do
    same "z$stage-np$np" "$np" zero_optimization.stage=$stage
  done
done
OFFLOADS=('zero_optimization.offload_optimizer.device="cpu"')
same "z2-np2-bf16" 2 zero_optimization.stage=2 bf16.enabled=true
same "z3-np2-fp16" 2 zero_optimization.stage=3 fp16.enabled=true fp16.initial_scale_power=12
OFFLOADS=('zero_optimization.offload_optimizer.device="cpu" zero_optimization.offload_param.device="cpu" zero_optimization.offload_param.buffer_size=8000')
same "z3-np2-bf16-params" 2 zero_optimization.stage=3 bf16.enabled=true
same "z3-np2-p2-params" 2 zero_optimization.stage=3 pipeline.parallel_size=2
OFFLOADS=('zero_optimization.offload_optimizer.device="cpu"')
same "z1-np2-p2" 2 zero_optimization.stage=1 pipeline.parallel_size=2
same "z2-np1-accum" 1 zero_optimization.stage=2 train_micro_batch_size_per_gpu=3
# offload.grad_accumulation "device": the micro-batches add up on the device
# and land once; bits of no offload (float adds commute), stages 2 and 3,
# with the parameters offloaded too, and with the delayed update's two
# gradient buffers.
OFFLOADS=('zero_optimization.offload_optimizer.device="cpu" offload.grad_accumulation="device"')
same "z2-np2-accum-device" 2 zero_optimization.stage=2 train_micro_batch_size_per_gpu=1
same "z3-np1-accum-device" 1 zero_optimization.stage=3 train_micro_batch_size_per_gpu=2 bf16.enabled=true
OFFLOADS=('zero_optimization.offload_optimizer.device="cpu" zero_optimization.offload_param.device="cpu" zero_optimization.offload_param.buffer_size=8000 offload.grad_accumulation="device"')
same "z3-np2-accum-device-params" 2 zero_optimization.stage=3 train_micro_batch_size_per_gpu=1
# [Note: norm on the device]: a unit whose gradient lands once a step in one
# piece (a reduce bucket larger than the shard) has its sum of squares from
# the device; the norm, and so the clipped update, keep the bits of no
# offload: no accumulation, one breadth-first group of every micro-batch,
# and accumulation on the device.
BIG=zero_optimization.reduce_bucket_size=100000000
OFFLOADS=('zero_optimization.offload_optimizer.device="cpu"')
same "z2-np2-once" 2 zero_optimization.stage=2 train_batch_size=4 $BIG
same "z3-np1-group" 1 zero_optimization.stage=3 train.breadth_first_group=6 $BIG
# [Note: host sums of squares]: a unit that lands several times a step in
# one piece is added on the host, and the last add's sum of squares stands
# for the host's sum over the shard: the same norm bits, one micro-batch at
# a time and in breadth-first groups of fewer than all micro-batches.
same "z2-np2-accum-host-sums" 2 zero_optimization.stage=2 train_micro_batch_size_per_gpu=1 $BIG
same "z3-np1-groups-host-sums" 1 zero_optimization.stage=3 train_micro_batch_size_per_gpu=1 train.breadth_first_group=4 $BIG
# Groups of 5 of 12 micro-batches (5, 5, then the 2 left), the parameters
# uploaded from the host's master: the bits of no offload in the same groups.
OFFLOADS=('zero_optimization.offload_optimizer.device="cpu" zero_optimization.offload_param.device="cpu" zero_optimization.offload_param.buffer_size=8000 offload.param_from_master=true')
same "z3-np1-uneven-groups-params" 1 zero_optimization.stage=3 bf16.enabled=true train_micro_batch_size_per_gpu=1 train.breadth_first_group=5 $BIG
OFFLOADS=('zero_optimization.offload_optimizer.device="cpu"')
# [Note: streamed update]: the exact update runs beside the next step's
# forward, and the step reports it so.
run_with 2 c.json streamed zero_optimization.stage=2 train_batch_size=4 wall_clock_breakdown=true \
  'zero_optimization.offload_optimizer.device="cpu"'
if [ "$RC" = 0 ] && grep '"step":3,' streamed/metrics.jsonl | grep -q '"streamed":true'; then
  echo "ok: the exact update is streamed under the next forward"
else
  fail "the exact update is not reported streamed (exit $RC): $(grep '"step":3,' streamed/metrics.jsonl | grep -o '"offload":{[^}]*}')"
fi
OFFLOADS=('zero_optimization.offload_optimizer.device="cpu" offload.grad_accumulation="device"')
same "z2-np2-accum-device-once" 2 zero_optimization.stage=2 $BIG
OFFLOADS=('zero_optimization.offload_optimizer.device="cpu" zero_optimization.offload_optimizer.ratio=0.4')
same "z3-np2-ratio" 2 zero_optimization.stage=3 bf16.enabled=true
# offload.param_from_master ([Note: parameters from the master]): no host
# copy of the parameters, uploads rounded on the device from the master; the
# bits of no offload in bf16 (the device's rounding is the host AdamW's),
# with a pool of 2 buffers on 3 ranks, and 2 bytes per owned parameter less
# pinned host memory than with the copy.
PM='zero_optimization.offload_optimizer.device="cpu" zero_optimization.offload_optimizer.pin_memory=true zero_optimization.offload_param.device="cpu" zero_optimization.offload_param.pin_memory=true zero_optimization.offload_param.buffer_size=8000'
OFFLOADS=("$PM" "$PM offload.param_from_master=true")
same "z3-np2-bf16-master" 2 zero_optimization.stage=3 bf16.enabled=true
OFFLOADS=("$PM zero_optimization.offload_param.buffer_count=2 offload.param_from_master=true")
same "z3-np3-bf16-master" 3 zero_optimization.stage=3 bf16.enabled=true train_batch_size=12
pinned_saves z3-np2-bf16-master-off1 z3-np2-bf16-master-off2 c.json "with the copy against from the master"

# Resume across offload modes: 10 steps straight equal 5 steps saved with one
# mode and 5 more resumed with the other.
cat > r.json <<'JSON'
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1, "gradient_clipping": 0.5,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
 "zero_optimization": {"stage": 2},
 "model": {"n_layer": 3, "n_head": 2, "d_model": 32, "seq_len": 16, "vocab_size": 64},
 "checkpoint": {"dir": "ck", "interval": 5},
 "train": {"steps": 10, "eval_interval": 0}}
JSON
CPU='zero_optimization.offload_optimizer.device="cpu"'
NONE='zero_optimization.offload_optimizer.device="none"'
for stage in 2 3; do
  run_np 2 r.json --log-dir straight$stage --set zero_optimization.stage=$stage --set checkpoint.dir='"ck_straight'$stage'"'
  losses straight$stage/metrics.jsonl | tail -5 > x
  for pair in "$NONE $CPU" "$CPU $NONE" "$CPU $CPU"; do
    set -- $pair
    rm -rf ck
    d=$RANDOM$RANDOM
    run_np 2 r.json --log-dir first$d --set zero_optimization.stage=$stage --set "$1" --steps 5
    run_np 2 r.json --log-dir second$d --set zero_optimization.stage=$stage --set "$2" --resume auto
    name="stage $stage saved with ${1#*=}, resumed with ${2#*=}"
    [ "$RC" = 0 ] && grep -q "resumed from ck/step_5" "$WORK/out" || { fail "$name: resume"; continue; }
    losses second$d/metrics.jsonl > y
    if [ -s x ] && cmp -s x y; then echo "ok: $name: bit-exact"; else fail "$name: losses differ: $(tr "\n" " " < x) vs $(tr "\n" " " < y)"; fi
  done
done

# Resume at stage 3 with the parameters offloaded, from the host copy to the
# master and back.
P3='zero_optimization.offload_param.device="cpu"'
run_np 2 r.json --log-dir straightp --set zero_optimization.stage=3 --set "$CPU" --set "$P3" \
  --set checkpoint.dir='"ck_straightp"'
losses straightp/metrics.jsonl | tail -5 > x
for pair in "false true" "true false"; do
  set -- $pair
  rm -rf ck
  run_np 2 r.json --log-dir firstp$1 --set zero_optimization.stage=3 --set "$CPU" --set "$P3" \
    --set offload.param_from_master=$1 --steps 5
  run_np 2 r.json --log-dir secondp$1 --set zero_optimization.stage=3 --set "$CPU" --set "$P3" \
    --set offload.param_from_master=$2 --resume auto
  name="stage 3, parameters from the master $1 then $2"
  [ "$RC" = 0 ] && grep -q "resumed from ck/step_5" "$WORK/out" || { fail "$name: resume"; continue; }
  losses secondp$1/metrics.jsonl > y
  if [ -s x ] && cmp -s x y; then echo "ok: $name: bit-exact"; else fail "$name: losses differ: $(tr "\n" " " < x) vs $(tr "\n" " " < y)"; fi
done

# Delayed parameter update ([Note: delayed parameter update]): the warm-up
# steps and the first delayed one (which still computes with the last exact
# update) have the exact bits; the delayed run is the same in every ZeRO
# ZeRO stages 2 and 3 (it is deterministic; stage 1 and the rank count change
# the order of the gradient sums, exact or delayed); it learns about as well.
DELAY=(--set 'zero_optimization.offload_optimizer.device="cpu"' --set offload.delayed_update=true
       --set offload.delayed_update_warmup=2 --set train.steps=16 --set train.eval_interval=8)
run_np 2 c.json --log-dir exact16 --set zero_optimization.stage=2 --set train.steps=16 --set train.eval_interval=8
bits exact16 > exact16.txt
for layout in "2 2" "2 3" "3 2" "3 3"; do
  set -- $layout
  run_np "$1" c.json --log-dir "delay-$1-$2" --set zero_optimization.stage=$2 "${DELAY[@]}"
  [ "$RC" = 0 ] || { fail "delayed np $1 stage $2: exit $RC"; continue; }
  bits "delay-$1-$2" > "delay-$1-$2.txt"
done
if head -3 exact16.txt | cmp -s - <(head -3 delay-2-2.txt) && ! head -4 exact16.txt | cmp -s - <(head -4 delay-2-2.txt); then
  echo "ok: delayed update: steps 1-3 exact, step 4 on the delayed parameters"
else
  fail "delayed update: first steps $(head -4 delay-2-2.txt | tr '\n' ' ') vs exact $(head -4 exact16.txt | tr '\n' ' ')"
fi
for pair in "2-2 2-3" "3-2 3-3"; do
  set -- $pair
  if [ "$(wc -l < delay-$1.txt)" = 16 ] && cmp -s delay-$1.txt delay-$2.txt; then
    echo "ok: delayed update, np-stage $2 has the bits of $1"
  else
    fail "delayed update, np-stage $2 differs from $1"
  fi
done
e=$(losses exact16/metrics.jsonl | tail -1); d=$(losses delay-2-2/metrics.jsonl | tail -1)
if awk -v e="$e" -v d="$d" 'BEGIN { exit !(d < 4.0 && d < e * 1.05) }'; then
  echo "ok: delayed update learns: loss $d at step 16 (exact $e)"
else
  fail "delayed update: loss $d at step 16, exact $e"
fi

# Memory per rank, measured against the estimator (--dry-run): device tags
# params, grads, optim and the pinned and pageable host memory, within 10%,
# for each host offload mode.
cp "$SRC/tests/apps/offload_memory.json" m.json
MODES=("stage2-cpu zero_optimization.stage=2"
       "stage1-cpu-pinned zero_optimization.stage=1 zero_optimization.offload_optimizer.pin_memory=true"
       "stage2-cpu-delayed zero_optimization.stage=2 offload.delayed_update=true offload.delayed_update_warmup=1"
       "stage3-cpu-cpu zero_optimization.stage=3 zero_optimization.offload_param.device=\"cpu\" zero_optimization.offload_param.pin_memory=true"
       "stage3-cpu-cpu-master zero_optimization.stage=3 zero_optimization.offload_param.device=\"cpu\" zero_optimization.offload_param.pin_memory=true offload.param_from_master=true"
       "stage3-cpu-ratio zero_optimization.stage=3 zero_optimization.offload_optimizer.ratio=0.5"
       "stage2-cpu-accum-device zero_optimization.stage=2 gradient_accumulation_steps=2 offload.grad_accumulation=\"device\""
       "stage2-nvme zero_optimization.stage=2 zero_optimization.offload_optimizer.device=\"nvme\" zero_optimization.offload_optimizer.nvme_path=\"$WORK/swap-mem\" zero_optimization.sub_group_size=20000 zero_optimization.offload_optimizer.buffer_count=6")
TAGS="params:parameters (working;grads:gradients (fp32);optim:optimizer (master;pinned:pinned host memory;pageable:pageable host memory;comm:communication buckets;total:device total"
for mode in "${MODES[@]}"; do
  set -f
  # shellcheck disable=SC2086
  set -- $mode
  set +f
  name=$1
  shift
  memory_vs_estimate "$name" m.json "$TAGS" "$@"
done

expect_error "parameter offload with the optimizer on the device" 2 \
  "offload_param needs ZeRO stage 3 with offload_optimizer" c.json --set zero_optimization.stage=3 \
  --set 'zero_optimization.offload_param.device="cpu"'
expect_error "parameter shard larger than buffer_size" 2 "offload_param.buffer_size 100 is smaller than the shard" \
  c.json --set zero_optimization.stage=3 --set "$CPU" --set 'zero_optimization.offload_param.device="cpu"' \
  --set zero_optimization.offload_param.buffer_size=100
expect_error "host memory too small for the offloaded states" 2 \
  "offload needs .* of host memory per rank .* x 2 ranks on this node = .* available \\(MemAvailable\\)" c.json \
  --set zero_optimization.stage=2 --set "$CPU" --set model.n_layer=80 --set model.d_model=8192 --set model.n_head=64
expect_error "device gradient accumulation at stage 1" 2 "offload.grad_accumulation.*stage 2 or 3" c.json \
  --set zero_optimization.stage=1 --set "$CPU" --set 'offload.grad_accumulation="device"'
expect_error "device gradient accumulation with one micro-batch a step" 2 \
  "offload.grad_accumulation \"device\" adds the micro-batches .* 1 micro-batch" c.json \
  --set zero_optimization.stage=2 --set "$CPU" --set train_micro_batch_size_per_gpu=6 --set 'offload.grad_accumulation="device"'
expect_error "parameters from the master without parameter offload" 2 \
  "offload.param_from_master: true uploads the parameters from the fp32 master" c.json \
  --set zero_optimization.stage=3 --set 'zero_optimization.offload_optimizer.device="cpu"' --set offload.param_from_master=true
expect_error "parameters from the master with the delayed update" 2 \
  "offload.param_from_master: true uploads the parameters from the master that the delayed update rewrites" c.json \
  --set zero_optimization.stage=3 --set 'zero_optimization.offload_optimizer.device="cpu"' \
  --set 'zero_optimization.offload_param.device="cpu"' --set offload.param_from_master=true --set offload.delayed_update=true
expect_error "optimizer offload with stage 0" 2 "offload_optimizer.*stage 0" c.json \
  --set zero_optimization.stage=0 --set "$CPU"
finish
