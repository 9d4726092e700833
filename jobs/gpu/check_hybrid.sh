#!/usr/bin/env bash
# GPU host checks of the host-side layers on the GPU (see docs/cuda.md):
#   - pipeline P=2 (V=1 1F1B and V=2 interleaved) with ZeRO-1 and ZeRO-3, two
#     ranks sharing the one GPU (MPI staged through host memory), fp32,
#     against the same run on the CPU;
#   - checkpoints on the GPU: 10 steps straight equal 5 steps, a restart with
#     --resume auto and 5 steps, bit for bit (ZeRO-3 on one rank in bf16, and
#     P=2 V=2 ZeRO-1 on two ranks in fp32);
#   - the Hugging Face interop test (tests/apps/hf_interop.sh).
# Usage (on the GPU host, from the repository root):
#   jobs/gpu/check_hybrid.sh BUNDLE_DIR OUT_DIR
set -uo pipefail
# shellcheck source=jobs/gpu/lib.sh
. "$(dirname "$0")/lib.sh" check_hybrid.sh "$@"
losses() { grep '"step"' "$1" | grep -o '"loss":[^,}]*' | cut -d: -f2; }
maxrel() {  # maxrel A B: the largest relative difference of two loss columns
  paste <(losses "$1") <(losses "$2") | awk '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d; n++ }
    END { if (n == 0) print "no-steps"; else printf "%.2e over %d steps\n", m, n }'
}

cat > "$out/pp.json" <<'JSON'
{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
 "model": {"n_layer": 4, "n_head": 4, "d_model": 128, "seq_len": 64, "vocab_size": 256},
 "train": {"steps": 12, "eval_interval": 0}}
JSON
for pv in "1 1f1b" "2 interleaved"; do
  set -- $pv
  for stage in 1 3; do
    name="pp-v$1-z$stage"
    sets=(--set pipeline.parallel_size=2 --set pipeline.num_chunks=$1 --set pipeline.pipe_schedule_name=$2
          --set zero_optimization.stage=$stage --set wall_clock_breakdown=true)
    "${mpi[@]}" -np 2 "$bundle/bin/ztrain" "$out/pp.json" --device cpu "${sets[@]}" --log-dir "$out/$name-cpu" \
      > "$out/$name-cpu.log" 2>&1 || note "$name cpu: rc=$?"
    "${mpi[@]}" -np 2 "$bundle/bin/ztrain" "$out/pp.json" --device cuda "${sets[@]}" --log-dir "$out/$name-gpu" \
      > "$out/$name-gpu.log" 2>&1 || note "$name gpu: rc=$?"
    note "pipeline P=2 V=$1 ($2) ZeRO-$stage, 2 ranks on one GPU vs CPU: max rel loss diff $(maxrel "$out/$name-cpu/metrics.jsonl" "$out/$name-gpu/metrics.jsonl");" \
      "$(grep -h "device" "$out/$name-gpu.log" | head -1)"
  done
done

ckpt_case() {  # ckpt_case NAME NP ARGS...: straight vs restarted, identical loss bits
  local name=$1 np=$2
  shift 2
  rm -rf "$out/$name"
  mkdir -p "$out/$name"
  "${mpi[@]}" -np "$np" "$bundle/bin/ztrain" "$out/pp.json" --device cuda --steps 10 "$@" \
    --set checkpoint.dir="\"$out/$name/cka\"" --set checkpoint.interval=5 --log-dir "$out/$name/straight" > "$out/$name/straight.log" 2>&1
  local rc1=$?
  "${mpi[@]}" -np "$np" "$bundle/bin/ztrain" "$out/pp.json" --device cuda --steps 5 "$@" \
    --set checkpoint.dir="\"$out/$name/ckb\"" --set checkpoint.interval=5 --log-dir "$out/$name/first" > "$out/$name/first.log" 2>&1
  local rc2=$?
  "${mpi[@]}" -np "$np" "$bundle/bin/ztrain" "$out/pp.json" --device cuda --steps 10 "$@" --resume auto \
    --set checkpoint.dir="\"$out/$name/ckb\"" --set checkpoint.interval=5 --log-dir "$out/$name/second" > "$out/$name/second.log" 2>&1
  local rc3=$?
  if [ "$rc1$rc2$rc3" = 000 ] && [ -n "$(losses "$out/$name/straight/metrics.jsonl")" ] &&
     [ "$(losses "$out/$name/straight/metrics.jsonl")" = "$( (losses "$out/$name/first/metrics.jsonl"; losses "$out/$name/second/metrics.jsonl") )" ]; then
    note "checkpoint $name on the GPU: 10 straight == 5 + resume + 5, identical loss bits ($(losses "$out/$name/straight/metrics.jsonl" | wc -l) steps)"
  else
    note "checkpoint $name on the GPU: FAIL (rc $rc1 $rc2 $rc3)"
    paste <(losses "$out/$name/straight/metrics.jsonl") <( (losses "$out/$name/first/metrics.jsonl"; losses "$out/$name/second/metrics.jsonl") ) >> "$summary"
  fi
  grep -h "checkpoint: step\|resum" "$out/$name/second.log" | head -2 >> "$summary"
}
ckpt_case z3-bf16-np1 1 --set zero_optimization.stage=3 --set bf16.enabled=true
ckpt_case pp2-v2-z1-np2 2 --set zero_optimization.stage=1 --set pipeline.parallel_size=2 --set pipeline.num_chunks=2 \
  --set pipeline.pipe_schedule_name=interleaved

ZTRAIN=$PWD/$bundle/bin/ztrain ZCKPT=$PWD/$bundle/bin/zckpt ZDATA=$PWD/$bundle/bin/zdata MPIEXEC=mpirun \
  MPI_FLAGS="--allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH" SRC=$PWD OMP_NUM_THREADS=1 \
  bash tests/apps/hf_interop.sh > "$out/hf_interop.log" 2>&1
note "hf_interop: rc=$? $(grep -E '^(ok|FAIL|skip)' "$out/hf_interop.log" | tr '\n' ' ')"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" >> "$summary" 2>&1
