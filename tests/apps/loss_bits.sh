#!/usr/bin/env bash
# Loss bits of a fixed set of layouts, against tests/apps/loss_bits.golden.
#
# Each layout (ranks, ZeRO stage, pipeline P/V/schedule, fp32/bf16/fp16,
# activation checkpointing, accumulation, clipping, validation) trains a small
# GPT for a few steps; the loss, gradient norm and validation loss of every
# step are kept as printed in metrics.jsonl (17 significant digits: the
# double's exact bits). The golden file was recorded by the trainer before its
# step walk was restructured; the restructured trainer must give the same
# bits, layout by layout.
#
# OpenBLAS picks its GEMM kernels by CPU; the file was recorded with the
# Haswell kernels, forced here with OPENBLAS_CORETYPE so that any x86-64 CPU
# with AVX2 reproduces it. ZT_UPDATE_GOLDEN=FILE writes the bits to FILE
# instead of comparing.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
export OPENBLAS_CORETYPE=Haswell
MPI_FLAGS="$MPI_FLAGS -x OPENBLAS_CORETYPE"
golden="$SRC/tests/apps/loss_bits.golden"

cat > c.json <<'JSON'
{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1,
 "gradient_clipping": 0.3,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.004, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.004, "warmup_num_steps": 3, "warmup_type": "linear"}},
 "zero_optimization": {"stage": 0, "reduce_bucket_size": 2000, "allgather_bucket_size": 3000,
                       "stage3_param_persistence_threshold": 200, "stage3_prefetch_bucket_size": 20000},
 "model": {"n_layer": 8, "n_head": 2, "d_model": 24, "seq_len": 16, "vocab_size": 64},
 "train": {"steps": 6, "eval_interval": 3, "eval_steps": 2}}
JSON

# name np settings...
LAYOUTS=(
  "np1-z0-f32 1"
  "np1-z0-bf16-ckpt 1 bf16.enabled=true model.activation_checkpointing=true"
  "np1-z3-bf16 1 zero_optimization.stage=3 bf16.enabled=true"
  "np2-z1-f32 2 zero_optimization.stage=1"
  "np2-z2-f32-ckpt 2 zero_optimization.stage=2 model.activation_checkpointing=true"
  "np2-z2-fp16 2 zero_optimization.stage=2 fp16.enabled=true fp16.initial_scale_power=12"
  "np3-z3-f32 3 zero_optimization.stage=3 train_batch_size=12"
  "np4-z2-bf16 4 zero_optimization.stage=2 bf16.enabled=true"
  "np4-z3-f32-ckpt-overlap 4 zero_optimization.stage=3 zero_optimization.overlap_comm=true model.activation_checkpointing=true"
  "np2-p2-1f1b-z0-f32 2 pipeline.parallel_size=2"
  "np2-p2v2-int-z1-bf16 2 pipeline.parallel_size=2 pipeline.pipe_schedule_name=\"interleaved\" pipeline.num_chunks=2 zero_optimization.stage=1 bf16.enabled=true"
  "np4-p2v2-int-dp2-z3-f32-ckpt 4 pipeline.parallel_size=2 pipeline.pipe_schedule_name=\"interleaved\" pipeline.num_chunks=2 zero_optimization.stage=3 model.activation_checkpointing=true"
  "np4-p4-1f1b-z2-f32 4 pipeline.parallel_size=4 zero_optimization.stage=2"
  "np4-p4v2-int-z1-bf16 4 pipeline.parallel_size=4 pipeline.pipe_schedule_name=\"interleaved\" pipeline.num_chunks=2 zero_optimization.stage=1 bf16.enabled=true"
  "np4-p2-gpipe-dp2-z2-f32 4 pipeline.parallel_size=2 pipeline.pipe_schedule_name=\"gpipe\" zero_optimization.stage=2"
)
# Layouts that must give the bits of a golden layout: recomputing only some
# blocks ([Note: partial recomputation]) changes no arithmetic.
# name golden-name np settings...
SAME_AS=(
  "np1-z0-bf16-rec3 np1-z0-bf16-ckpt 1 bf16.enabled=true model.activation_checkpointing=true model.recompute_layers=3"
  "np4-p2v2-int-dp2-z3-f32-rec1 np4-p2v2-int-dp2-z3-f32-ckpt 4 pipeline.parallel_size=2 pipeline.pipe_schedule_name=\"interleaved\" pipeline.num_chunks=2 zero_optimization.stage=3 model.activation_checkpointing=true model.recompute_layers=1"
)

train_layout() {  # train_layout OUT NAME NP SETTINGS...: appends NAME's bits to OUT
  local out=$1 name=$2 np=$3
  shift 3
  run_with "$np" c.json "$name" "$@"
  if [ "$RC" != 0 ]; then
    fail "$name: exit code $RC"
    return
  fi
  grep '"step"' "$name/metrics.jsonl" | while IFS= read -r rec; do
    step=$(echo "$rec" | grep -o '"step":[0-9]*' | cut -d: -f2)
    line="$name step $step"
    for k in loss grad_norm val_loss; do
      v=$(echo "$rec" | grep -o "\"$k\":[^,}]*" | cut -d: -f2)
      [ -n "$v" ] && line="$line $k=$v"
    done
    echo "$line"
  done >> "$out"
}

: > bits.txt
for l in "${LAYOUTS[@]}"; do
  set -f
  # shellcheck disable=SC2086
  set -- $l
  set +f
  train_layout bits.txt "$@"
done

if [ -n "${ZT_UPDATE_GOLDEN:-}" ]; then
  cp bits.txt "$ZT_UPDATE_GOLDEN"
  echo "wrote $(wc -l < bits.txt) lines to $ZT_UPDATE_GOLDEN"
  finish
  exit 0
fi
# compare NAME FILE REF: NAME's steps in FILE against REF's in the golden file.
compare() {
  local name=$1 file=$2 ref=$3 n
  if diff <(grep "^$ref " "$golden" | cut -d' ' -f2-) <(grep "^$name " "$file" | cut -d' ' -f2-) > d.txt; then
    n=$(grep -c "^$name " "$file" || true)
    [ "$n" -gt 0 ] && echo "ok: $name: $n steps, the bits of $ref in the golden file" || fail "$name: no steps recorded"
  else
    fail "$name: bits differ from $ref's in the golden file"
    head -8 d.txt
  fi
}
for l in "${LAYOUTS[@]}"; do
  name=${l%% *}
  compare "$name" bits.txt "$name"
done
: > same.txt
for l in "${SAME_AS[@]}"; do
  set -f
  # shellcheck disable=SC2086
  set -- $l
  set +f
  name=$1 ref=$2
  shift 2
  train_layout same.txt "$name" "$@"
  compare "$name" same.txt "$ref"
done
# Keeping 5 of 8 blocks' activations needs more than recomputing all 8.
peak_act() { grep '"event":"end"' "$1/metrics.jsonl" | grep -o '"activations":[0-9]*' | cut -d: -f2; }
all=$(peak_act np1-z0-bf16-ckpt) part=$(peak_act np1-z0-bf16-rec3)
if [ -n "$all" ] && [ -n "$part" ] && [ "$part" -gt "$all" ]; then
  echo "ok: activations at their peak: $part B recomputing 3 blocks, $all B recomputing all"
else
  fail "peak activations: '$part' B recomputing 3 blocks, not more than '$all' B recomputing all"
fi
finish
