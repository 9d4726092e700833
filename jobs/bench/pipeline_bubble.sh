#!/usr/bin/env bash
# Measured pipeline bubble against the schedule's (P-1)/(V*M), on this machine:
# a balanced model (uniform partition), P=2 with 1F1B and interleaved V=2, and
# P=4 1F1B, M=16 micro-batches. Run on an otherwise idle machine.
#   jobs/bench/pipeline_bubble.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
flags=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
out=$(mktemp -d)
cat > "$out/c.json" <<'JSON'
{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1, "steps_per_print": 5, "wall_clock_breakdown": true,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
 "pipeline": {"parallel_size": 2, "partition": "uniform"},
 "model": {"n_layer": 8, "n_head": 4, "d_model": 128, "seq_len": 64, "vocab_size": 64},
 "train": {"steps": 10, "eval_interval": 0}}
JSON
printf '%-28s %10s %10s\n' layout measured schedule
for spec in "2 1f1b 1" "2 interleaved 2" "4 1f1b 1"; do
  set -- $spec
  OMP_NUM_THREADS=1 mpirun "${flags[@]}" -np "$1" "$build/bin/ztrain" "$out/c.json" --log-dir "$out/r" \
    --set pipeline.parallel_size="$1" --set pipeline.pipe_schedule_name="\"$2\"" --set pipeline.num_chunks="$3" > "$out/log" 2>&1
  m=$(grep -o '"bubble_measured":[^,}]*' "$out/r/metrics.jsonl" | cut -d: -f2 | sort -g | head -1)
  i=$(grep -o '"bubble_schedule":[^,}]*' "$out/r/metrics.jsonl" | tail -1 | cut -d: -f2)
  printf '%-28s %9.1f%% %9.1f%%\n' "P=$1 $2 V=$3 M=16" "$(awk -v m="$m" 'BEGIN{print m*100}')" "$(awk -v i="$i" 'BEGIN{print i*100}')"
done
rm -rf "$out"
