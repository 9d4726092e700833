#!/usr/bin/env bash
# The training step as CUDA graphs ([Note: step graph] in
# src/runtime/device.hpp) against the same steps queued operation by
# operation (ZTRAIN_CUDA_GRAPH=0), on the GPU host: the tiny GPT in bf16 at
# ZeRO stage 0, in fp32, with two micro-batches a step, with validation and
# checkpoints between steps, and the tiny Llama, 20 steps each; the losses
# (validation losses too) and gradient norms must be equal bit for bit, a
# run resumed with graphs must continue as the run without,
# and the log must show 19 steps in graphs, each instantiated once (every
# later step an update of it). ZeRO stages 1-3 on one rank (stage 2 also
# with overlap_comm, stage 3's default) record too (their
# collectives are local copies: [Note: one-rank group] in
# src/comm/nccl_communicator.cpp); two ranks must run without graphs and say
# why.
# Usage (on the GPU host, from the repository root):
#   jobs/gpu/check_graph.sh BUNDLE_DIR OUT_DIR
set -uo pipefail
# shellcheck source=jobs/gpu/lib.sh
. "$(dirname "$0")/lib.sh" check_graph.sh "$@"

tiny_config "$out/tiny.json"

for run in "bf16:--set bf16.enabled=true" "fp32:--set bf16.enabled=false" \
           "acc:--set bf16.enabled=true --set train_micro_batch_size_per_gpu=4 --set train_batch_size=8" \
           "llama:--set bf16.enabled=true --set model.preset=llama-tiny" \
           "z1:--set bf16.enabled=true --set zero_optimization.stage=1" \
           "z2:--set bf16.enabled=true --set zero_optimization.stage=2" \
           "z3:--set bf16.enabled=true --set zero_optimization.stage=3" \
           "z2o:--set bf16.enabled=true --set zero_optimization.stage=2 --set zero_optimization.overlap_comm=true" \
           "eval:--set bf16.enabled=true --set train.eval_interval=5 --set train.eval_steps=2 --set checkpoint.interval=7"; do
  tag=${run%%:*}
  read -r -a extra <<< "${run#*:}"
  for g in 0 1; do
    ck=()
    [ "$tag" = eval ] && ck=(--set "checkpoint.dir=\"$out/ck-$g\"")
    ZTRAIN_CUDA_GRAPH=$g "${mpi[@]}" -x ZTRAIN_CUDA_GRAPH -np 1 "$bundle/bin/ztrain" "$out/tiny.json" --device cuda \
      --steps 20 "${extra[@]}" "${ck[@]}" --log-dir "$out/graph-$tag-$g" > "$out/graph-$tag-$g.log" 2>&1 || note "graph $tag $g: rc=$?"
  done
  python3 - "$tag" "$out/graph-$tag-0/metrics.jsonl" "$out/graph-$tag-1/metrics.jsonl" "$out/graph-$tag-1.log" <<'PY' | tee -a "$summary"
import json, re, sys
tag, a, b, log = sys.argv[1:]
def rows(p):
    try: return [(r["step"], r["loss"], r.get("grad_norm"), r.get("val_loss")) for r in map(json.loads, open(p))
                 if "step" in r and "loss" in r]
    except OSError: return []
ra, rb = rows(a), rows(b)
line = next((l.strip() for l in open(log) if "CUDA graph of the step:" in l), "no graph summary in the log")
m = re.search(r"(\d+) steps, each in (\d+) graphs of (\d+) operations in all, (\d+) instantiations, (\d+) updates", line)
ok = (bool(ra) and ra == rb and m is not None and int(m.group(1)) == 19 and int(m.group(4)) == int(m.group(2))
      and int(m.group(5)) == 18 * int(m.group(2)))
print(f"CUDA graph of the step, {tag}, 20 steps: {'ok' if ok else 'FAIL'} ({len(ra)} steps, losses and norms "
      f"{'equal' if ra == rb else 'differ'}; {line.split('CUDA graph of the step: ')[-1]})")
PY
done
# Resumed from the eval run's checkpoint at step 14 with graphs: the steps
# after it as in the uninterrupted run without graphs.
ZTRAIN_CUDA_GRAPH=1 "${mpi[@]}" -x ZTRAIN_CUDA_GRAPH -np 1 "$bundle/bin/ztrain" "$out/tiny.json" --device cuda \
  --steps 20 --set bf16.enabled=true --set train.eval_interval=5 --set train.eval_steps=2 --set checkpoint.interval=7 \
  --set "checkpoint.dir=\"$out/ck-1\"" --resume "$out/ck-1/step_14" --log-dir "$out/graph-resume" > "$out/graph-resume.log" 2>&1 \
  || note "graph resume: rc=$?"
python3 - "$out/graph-eval-0/metrics.jsonl" "$out/graph-resume/metrics.jsonl" <<'PY' | tee -a "$summary"
import json, sys
def rows(p, first):
    try: return [(r["step"], r["loss"], r.get("grad_norm"), r.get("val_loss")) for r in map(json.loads, open(p))
                 if "step" in r and "loss" in r and r["step"] > first]
    except OSError: return []
a, b = rows(sys.argv[1], 14), rows(sys.argv[2], 14)
ok = len(a) == 6 and a == b
print(f"CUDA graph of the step, resumed at step 14: {'ok' if ok else 'FAIL'} (steps 15-20 {'equal' if a == b else 'differ'} "
      f"to the run without graphs, {len(b)} steps)")
PY
ZTRAIN_CUDA_GRAPH=1 "${mpi[@]}" -x ZTRAIN_CUDA_GRAPH -np 2 "$bundle/bin/ztrain" "$out/tiny.json" --device cuda --steps 3 \
  --set zero_optimization.stage=3 --log-dir "$out/graph-np2" > "$out/graph-np2.log" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q "without a CUDA graph: more than one rank" "$out/graph-np2.log"; then
  note "CUDA graph of the step, ZeRO-3 on two ranks: ok (runs without, saying why)"
else
  note "CUDA graph of the step, ZeRO-3 on two ranks: FAIL (rc $rc)"
fi
