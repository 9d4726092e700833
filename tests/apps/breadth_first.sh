#!/usr/bin/env bash
# train.breadth_first_group ([Note: breadth-first walk] in
# src/pipeline/executor.hpp): micro-batches walked through each unit
# together.
#   - one group of all 8 micro-batches gives the same bits at ZeRO stage 3
#     as at stage 0 (each unit's gradient sums the micro-batches in the same
#     order on the device), and against the usual walk only float
#     reassociation: the losses within 1e-6;
#   - stage 3 gathers each unit once per group and reduces its gradient
#     once per group: on 2 ranks (one rank reduces without a collective) the
#     step's all-gather and reduce-scatter bytes fall by the group size;
#   - groups of 2 and 4 on 2 ranks, with the optimizer and the parameters on
#     the CPU and checkpointing of 3 blocks, stay within 1e-5 of the usual
#     walk; the activations of 4 micro-batches in flight are the
#     estimator's within 10%;
#   - groups of 3 of 8 micro-batches (3, 3, then the 2 left) stay within
#     1e-6 of the usual walk at stages 0 and 3, and stage 3 on 2 ranks
#     gathers and reduces once per group, 3 times a step; with the optimizer
#     and the parameters on the CPU, within 1e-5;
#   - a group larger than the step's micro-batches, or with a pipeline, is
#     refused by name.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"

cat > c.json <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8, "steps_per_print": 1,
 "gradient_clipping": 0.3, "wall_clock_breakdown": true,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.004, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "zero_optimization": {"stage": 0, "reduce_bucket_size": 2000, "allgather_bucket_size": 3000,
                       "stage3_param_persistence_threshold": 200, "stage3_prefetch_bucket_size": 20000,
                       "stage3_max_reuse_distance": 0},
 "model": {"n_layer": 8, "n_head": 2, "d_model": 24, "seq_len": 16, "vocab_size": 64},
 "train": {"steps": 4, "eval_interval": 2, "eval_steps": 2}}
JSON

train() {  # train NAME NP SETTINGS...
  local name=$1 np=$2
  shift 2
  run_with "$np" c.json "$name" "$@"
  [ "$RC" = 0 ] || { fail "$name: exit code $RC"; return 1; }
  # loss, grad_norm and val_loss of each step, as printed (exact bits)
  grep '"step"' "$name/metrics.jsonl" | while IFS= read -r rec; do
    for k in loss grad_norm val_loss; do echo "$rec" | grep -o "\"$k\":[^,}]*" || true; done | tr '\n' ' '
    echo
  done > "$name.bits"
  losses "$name/metrics.jsonl" > "$name.loss"
}
same() {  # same A B: identical bits
  if [ -s "$1.bits" ] && diff "$1.bits" "$2.bits" > /dev/null; then
    echo "ok: $1: the bits of $2 ($(wc -l < "$1.bits") steps)"
  else
    fail "$1: bits differ from $2's: $(paste -d'|' "$1.bits" "$2.bits" | head -2)"
  fi
}
near() {  # near A B REL: every loss of A within REL (relative) of B's
  if [ "$(wc -l < "$1.loss")" -gt 0 ] &&
     paste "$2.loss" "$1.loss" | awk -v r="$3" '{ d = $1 - $2; if (d < 0) d = -d; if (NF != 2 || d > r * $1) bad = 1 } END { exit bad }'; then
    echo "ok: $1: losses within $3 of $2's"
  else
    fail "$1: losses not within $3 of $2's: $(paste "$2.loss" "$1.loss" | tr '\n' ';')"
  fi
}
comm() { grep '"step"' "$1/metrics.jsonl" | head -1 | grep -o "\"$2\":[0-9]*" | cut -d: -f2; }

train z0 1 && train z0-g8 1 train.breadth_first_group=8 && train z3 1 zero_optimization.stage=3 &&
  train z3-g8 1 zero_optimization.stage=3 train.breadth_first_group=8 && {
  same z3-g8 z0-g8
  near z3-g8 z3 1e-6
  near z0-g8 z0 1e-6
}
# fewer NAME GROUPS: NAME's all-gather and reduce-scatter bytes a step are
# GROUPS/8 of z3-np2's (8 micro-batches one at a time).
fewer() {
  for k in all_gather reduce_scatter; do
    a=$(comm z3-np2 $k) b=$(comm "$1" $k)
    # but for the tied embedding, gathered once more per group
    if [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" -v g="$2" 'BEGIN { r = g * a / (8 * b); exit !(b > 0 && r > 0.99 && r <= 1) }'; then
      echo "ok: $k bytes a step: $a one micro-batch at a time, $b in $2 group(s)"
    else
      fail "$k bytes a step: '$a' one at a time, '$b' in $1 (expected $2/8 of it, within 1%)"
    fi
  done
}
train z3-np2 2 zero_optimization.stage=3 && {
  train z3-g8-np2 2 zero_optimization.stage=3 train.breadth_first_group=8 && fewer z3-g8-np2 1
  train z3-g3-np2 2 zero_optimization.stage=3 train.breadth_first_group=3 && fewer z3-g3-np2 3
}

# The last group takes what is left.
train z0-g3 1 train.breadth_first_group=3 && train z3-g3 1 zero_optimization.stage=3 train.breadth_first_group=3 && {
  near z0-g3 z0 1e-6
  near z3-g3 z3 1e-6
}

OFF=(zero_optimization.stage=3 'zero_optimization.offload_optimizer.device="cpu"'
     'zero_optimization.offload_param.device="cpu"' model.activation_checkpointing=true model.recompute_layers=3)
train off-np2 2 "${OFF[@]}" && for g in 2 3 4; do
  train "off-np2-g$g" 2 "${OFF[@]}" train.breadth_first_group=$g && near "off-np2-g$g" off-np2 1e-5
done
memory_vs_estimate g4 c.json "activations:activations" "${OFF[@]}" train.breadth_first_group=4

expect_error "group larger than the step" 2 \
  "train.breadth_first_group 9 is more than the 8 micro-batches" c.json --set train.breadth_first_group=9
expect_error "group with a pipeline" 2 "train.breadth_first_group: 2 walks groups of micro-batches through a whole" \
  c.json --set train.breadth_first_group=2 --set pipeline.parallel_size=2
finish
