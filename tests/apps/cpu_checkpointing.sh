#!/usr/bin/env bash
# activation_checkpointing.cpu_checkpointing ([Note: activation offload] in
# modules/activation_offload.hpp): the output a recomputed block passes to
# the next recomputed block waits for the backward in (pinned) host memory.
#   - the loss, gradient-norm and validation-loss bits of the same run
#     without it: one micro-batch at a time, breadth-first groups of 3 of 8
#     (3, 3, 2) at ZeRO stage 3 on 2 ranks, partial recomputation
#     (model.recompute_layers), the optimizer and the parameters on the CPU
#     in bf16 (the 24 GiB cap's layout), a pipeline of 2 stages (1F1B, and
#     interleaved with 2 chunks each: a chunk's last output goes to the next
#     stage, not to the host), and a checkpoint saved with it and resumed
#     without it;
#   - device activations and pinned host memory are the estimator's within
#     10% (one stage with 8 micro-batches in a group, and a pipeline stage),
#     and the device keeps less than without it;
#   - without model.activation_checkpointing, with fewer than two
#     recomputed blocks, or with more checkpoints than the node's available
#     memory holds, it is refused by name.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"

cat > c.json <<'JSON'
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8, "steps_per_print": 1,
 "gradient_clipping": 0.3,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.004, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "zero_optimization": {"stage": 0, "reduce_bucket_size": 20000, "allgather_bucket_size": 30000,
                       "stage3_param_persistence_threshold": 200},
 "model": {"n_layer": 6, "n_head": 2, "d_model": 64, "seq_len": 64, "vocab_size": 64,
           "activation_checkpointing": true},
 "train": {"steps": 4, "eval_interval": 2, "eval_steps": 2}}
JSON
CPU=activation_checkpointing.cpu_checkpointing=true

# same NAME NP SETTINGS...: the run with SETTINGS, with and without the
# offload of the checkpoints, gives the same bits.
same() {
  local name=$1 np=$2
  shift 2
  run_with "$np" c.json "$name-ref" "$@"
  [ "$RC" = 0 ] || { fail "$name: reference run exit $RC"; return; }
  bits "$name-ref" > "$name-ref.txt"
  run_with "$np" c.json "$name-cpu" "$@" "$CPU"
  [ "$RC" = 0 ] || { fail "$name: exit $RC with $CPU"; return; }
  bits "$name-cpu" > "$name-cpu.txt"
  if [ "$(grep -c val_loss "$name-ref.txt")" = 2 ] && [ "$(wc -l < "$name-ref.txt")" = 4 ] &&
     cmp -s "$name-ref.txt" "$name-cpu.txt"; then
    echo "ok: $name: the bits without the offload of the checkpoints"
  else
    fail "$name: bits differ from those without the offload of the checkpoints"
    diff "$name-ref.txt" "$name-cpu.txt" | head -4
  fi
}

same one-at-a-time 1
if grep -q "activation checkpointing on, checkpoints in host memory (cpu_checkpointing)" "$WORK/out"; then
  echo "ok: the start says where the checkpoints are"
else
  fail "the start does not say that the checkpoints are in host memory"
fi
same z3-np2-groups 2 zero_optimization.stage=3 train.breadth_first_group=3
same recompute-3 1 model.recompute_layers=3
OFF=(zero_optimization.stage=3 'zero_optimization.offload_optimizer.device="cpu"'
     'zero_optimization.offload_param.device="cpu"' offload.param_from_master=true bf16.enabled=true)
same offload-bf16-groups 1 "${OFF[@]}" train.breadth_first_group=4
same pipeline-p2 2 pipeline.parallel_size=2 zero_optimization.stage=1
same interleaved-p2-v2 2 pipeline.parallel_size=2 pipeline.pipe_schedule_name='"interleaved"' pipeline.num_chunks=2
for name in one-at-a-time z3-np2-groups pipeline-p2 interleaved-p2-v2; do
  p=$(peak "$name-cpu" pinned) r=$(peak "$name-ref" pinned)
  if [ -n "$p" ] && [ -n "$r" ] && [ "$p" -gt $((r + 65536)) ]; then
    echo "ok: $name: $p B of pinned host memory with the checkpoints there, $r B without"
  else
    fail "$name: '$p' B of pinned host memory with the checkpoints there, '$r' B without (expected 64 KiB more at least)"
  fi
done

# Saved with it at step 2, resumed without it: the bits of the run straight through.
run_np 1 c.json --log-dir ckpt-a --steps 2 --set "$CPU" --set checkpoint.dir='"ck"'
[ "$RC" = 0 ] || fail "checkpointed run: exit $RC"
run_np 1 c.json --log-dir ckpt-b --resume auto --set checkpoint.dir='"ck"'
[ "$RC" = 0 ] || fail "resumed run: exit $RC"
a=$(bits one-at-a-time-ref | sed -n 3,4p) b=$(bits ckpt-b | tail -2)
if [ -n "$a" ] && [ "$a" = "$b" ]; then
  echo "ok: saved with the checkpoints offloaded, resumed without: steps 3-4 have the bits of the run through"
else
  fail "resumed steps: '$b', the run through: '$a'"
fi

# Memory: 8 micro-batches in one group keep 8 x 5 offloaded block outputs in
# host memory and a pool of 8 + 1 + 2 of them on the device.
TAGS="activations:activations;pinned:pinned host memory"
memory_vs_estimate groups c.json "$TAGS" "$CPU" train.breadth_first_group=8
memory_vs_estimate groups-ref c.json "activations:activations" train.breadth_first_group=8
# A pipeline stage's pool: 2 + 2 outputs, its micro-batches in flight on the host.
memory_vs_estimate pipeline c.json "$TAGS" "$CPU" pipeline.parallel_size=2
with=$(peak mem-groups activations) without=$(peak mem-groups-ref activations)
if [ -n "$with" ] && [ -n "$without" ] && [ "$with" -lt "$without" ]; then
  echo "ok: device activations $with B with the offload, $without B without"
else
  fail "device activations '$with' B with the offload, not below '$without' B without"
fi

# More checkpoints than the node's memory holds: refused before anything is
# allocated, with the numbers (46 blocks x 2 GiB of f32 outputs a micro-batch, on 2 ranks).
expect_error "host memory" 2 \
  "activation_checkpointing.cpu_checkpointing: offload needs [0-9.]+ GiB of host memory per rank \\([0-9.]+ GiB pinned.*available \\(MemAvailable\\); leave activation_checkpointing.cpu_checkpointing false" \
  c.json --set "$CPU" --set model.d_model=4096 --set model.n_head=32 --set model.seq_len=4096 --set model.n_layer=48 \
  --set train_micro_batch_size_per_gpu=32
expect_error "without activation checkpointing" 2 \
  "activation_checkpointing.cpu_checkpointing: true keeps the checkpoints of recomputed blocks in host memory, but model.activation_checkpointing is false" \
  c.json --set "$CPU" --set model.activation_checkpointing=false
expect_error "one recomputed block" 2 \
  "activation_checkpointing.cpu_checkpointing: .*model.recompute_layers 1 recomputes fewer than two blocks" \
  c.json --set "$CPU" --set model.recompute_layers=1
finish
