#!/usr/bin/env bash
# Checkpoint save throughput against a plain sequential write of the same
# bytes on the same disk.
#
#   jobs/bench/checkpoint_io.sh ZTRAIN OUT_DIR [PRESET] [NP...]
#
# For each rank count NP (default 1 4), trains PRESET (default gpt2-1.3b,
# bf16, ZeRO-3 when NP > 1) for one step with a synchronous checkpoint at the
# end under OUT_DIR, and reads the "checkpoint: ... MB/s" line ztrain prints
# (bytes of every rank's file over the time from the copy of the state to the
# committed rename, all ranks together). Then writes the same number of bytes
# with `dd if=/dev/zero bs=16M conv=fsync` into OUT_DIR, NP streams at once
# for NP ranks, and prints both and their ratio. Several ranks on one GPU
# share it through the host-staged MPI communicator.
set -euo pipefail
ztrain=${1:?usage: checkpoint_io.sh ZTRAIN OUT_DIR [PRESET] [NP...]}
out=${2:?usage: checkpoint_io.sh ZTRAIN OUT_DIR [PRESET] [NP...]}
preset=${3:-gpt2-1.3b}
shift $(($# < 3 ? $# : 3))
nps=${*:-1 4}
mkdir -p "$out"
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x LD_LIBRARY_PATH)
device=$([ -e /dev/nvidia0 ] && echo cuda || echo cpu)
summary="$out/summary.txt"
: > "$summary"
for np in $nps; do
  stage=$([ "$np" -gt 1 ] && echo 3 || echo 0)
  cfg="$out/ckpt-np$np.json"
  cat > "$cfg" <<JSON
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "steps_per_print": 1,
 "bf16": {"enabled": true}, "zero_optimization": {"stage": $stage},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.0003}},
 "model": {"preset": "$preset"}, "train": {"steps": 1, "eval_interval": 0},
 "checkpoint": {"dir": "$out/ck-np$np", "interval": 1, "async": false}}
JSON
  rm -rf "$out/ck-np$np"
  "${mpi[@]}" -np "$np" "$ztrain" "$cfg" --device "$device" --log-dir "$out/log-np$np" > "$out/ztrain-np$np.log" 2>&1
  line=$(grep -o "checkpoint: step 1 saved .*" "$out/ztrain-np$np.log" | tail -1)
  mb=$(echo "$line" | sed -n 's/.*(\([0-9.e+]*\) MB in.*/\1/p')
  rate=$(echo "$line" | sed -n 's/.*s, \([0-9.e+]*\) MB\/s.*/\1/p')
  bytes=$(du -sb "$out/ck-np$np/step_1" | cut -f1)
  rm -rf "$out/ck-np$np"
  # The same bytes, NP sequential streams, each flushed before dd exits.
  per=$(awk -v b="$bytes" -v n="$np" 'BEGIN { printf "%d", b / n / 16777216 + 1 }')
  sync
  t0=$(date +%s.%N)
  for i in $(seq 1 "$np"); do dd if=/dev/zero of="$out/dd.$i" bs=16M count="$per" conv=fsync status=none & done
  wait
  t1=$(date +%s.%N)
  ddrate=$(awk -v b="$per" -v n="$np" -v a="$t0" -v z="$t1" 'BEGIN { printf "%.1f", b * n * 16.777216 / (z - a) }')
  rm -f "$out"/dd.*
  echo "$preset np $np (ZeRO-$stage): checkpoint $mb MB at $rate MB/s; dd conv=fsync x$np: $ddrate MB/s;" \
    "ratio $(awk -v a="$rate" -v b="$ddrate" 'BEGIN { printf "%.2f", a / b }')" | tee -a "$summary"
  grep -h "peak memory\|tok/s" "$out/ztrain-np$np.log" | tail -2 >> "$out/detail.txt" || true
done
