#!/usr/bin/env bash
# Memory per rank for ZeRO stages 0-3 at N = 4 and 8 ranks, bf16 parameters:
#  - measured peak bytes of the params, grads, optim and activations tags agree
#    with the estimator (--dry-run) within 10%;
#  - measured model states (params + grads + optim) follow the ZeRO paper's
#    division with fp32 gradients counted: 18Ψ (stage 0), 6Ψ + 16Ψ/N (stage 1:
#    bf16 params and full fp32 gradients replicated, fp32 gradient shard,
#    master, m, v partitioned), 2Ψ + 16Ψ/N (stage 2), 18Ψ/N (stage 3), within
#    5% plus the transient buffers of a bucket: one unit's fp32 gradient
#    and the tied embedding's (stages 2-3), and two gathered units plus the
#    embedding (stage 3, no reuse, no prefetch). overlap_comm is off: on the
#    CPU, MPI completes reductions late and more unit buffers stay alive.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
cat > c.json <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "steps_per_print": 1,
 "bf16": {"enabled": true},
 "zero_optimization": {"stage": 0, "stage3_max_reuse_distance": 0, "stage3_prefetch_bucket_size": 0,
                       "stage3_param_persistence_threshold": 1000,
                       "overlap_comm": false},
 "model": {"n_layer": 8, "n_head": 4, "d_model": 64, "seq_len": 32},
 "train": {"steps": 2, "eval_interval": 0}}
JSON
est() { grep "^  $2" "$1" | head -1 | awk '{ print $(NF-1) * 1048576 }'; }
peak() { tail -1 "$1/metrics.jsonl" | grep -o "\"$2\":[0-9]*" | cut -d: -f2; }
printf '%-3s %-5s %-12s %12s %12s %7s\n' N stage tag measured estimate ratio
for n in 4 8; do
  for stage in 0 1 2 3; do
    run_np $n c.json --dry-run --set zero_optimization.stage=$stage
    cp "$WORK/out" dry.txt
    run_np $n c.json --log-dir m$n-$stage --set zero_optimization.stage=$stage
    [ "$RC" = 0 ] || { fail "N $n stage $stage run failed"; continue; }
    psi=$(grep -o '[0-9]* parameters' "$WORK/out" | head -1 | cut -d' ' -f1)
    for pair in "params:parameters (working" "grads:gradients (fp32)" "optim:optimizer (master" "activations:activations "; do
      tag=${pair%%:*}
      m=$(peak m$n-$stage "$tag"); e=$(est dry.txt "${pair#*:}")
      r=$(awk -v m="$m" -v e="$e" 'BEGIN { printf "%.3f", m / e }')
      printf '%-3s %-5s %-12s %12s %12.0f %7s\n' $n $stage $tag "$m" "$e" "$r"
      awk -v r="$r" 'BEGIN { exit !(r >= 0.9 && r <= 1.1) }' || fail "N $n stage $stage $tag: measured/estimate $r"
    done
    states=$(( $(peak m$n-$stage params) + $(peak m$n-$stage grads) + $(peak m$n-$stage optim) ))
    # Largest unit: a block of 12 C^2 + 13 C elements; the tied embedding
    # (V + T) C, whose fp32 gradient lives through the whole backward.
    unit=$(( 12 * 64 * 64 + 13 * 64 )); emb=$(( (256 + 32) * 64 ))
    awk -v s="$states" -v p="$psi" -v n=$n -v st=$stage -v u=$unit -v emb=$emb 'BEGIN {
      if (st == 0) { e = 18 * p; extra = 0 }
      else if (st == 1) { e = 6 * p + 16 * p / n; extra = 0 }
      else if (st == 2) { e = 2 * p + 16 * p / n; extra = 4 * (u + emb) }
      else { e = 18 * p / n; extra = 4 * (u + emb) + 2 * (2 * u + emb) }
      printf "    model states N %d stage %d: %d bytes, paper %.0f (+ up to %d of bucket buffers)\n", n, st, s, e, extra
      exit !(s >= 0.95 * e && s <= 1.05 * e + extra) }' || fail "N $n stage $stage: model states off the paper's division"
  done
done
finish
