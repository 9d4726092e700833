#!/usr/bin/env bash
# GPU host checks in one go (see docs/cuda.md): kernel parity tests, device
# communicators, and training on the GPU against the CPU:
#   - 50 steps of bf16 on the GPU against the fp32 CPU loss curve,
#   - ZeRO stages 0-3 in fp32 on one rank (NCCL) and on 2 ranks sharing the
#     GPU (MPI staged through host memory) against the fp32 CPU run,
#   - fp16 with an injected overflow,
#   - activation_checkpointing.cpu_checkpointing against the same run
#     without it (the same bits).
#   - offload.grad_dtype "bf16" (gradients rounded on the device, copied to
#     the host in bf16): the same bits at ZeRO stages 2 and 3, close to fp32
#     gradients.
# Usage (on the GPU host, from the repository root):
#   jobs/gpu/check.sh BUNDLE_DIR OUT_DIR
set -uo pipefail
# shellcheck source=jobs/gpu/lib.sh
. "$(dirname "$0")/lib.sh" check.sh "$@"

for t in cuda_runtime cuda_kernels_parity cuda_adamw cuda_attention_parity cuda_classifier_parity cuda_gpt_parity cuda_llama_parity cuda_kernel_profile cuda_attn_timing; do
  [ -x "$bundle/bin/$t" ] || { note "$t: missing"; continue; }
  "$bundle/bin/$t" > "$out/$t.log" 2>&1
  note "$t: rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$t.log" | tr '\n' ' ')"
done
grep -h -E "TFLOP|ms" "$out/cuda_attn_timing.log" 2>/dev/null | head -8 | tee -a "$summary"
for np in 1 2; do
  "${mpi[@]}" -np $np "$bundle/bin/test_device_comm" > "$out/comm_np$np.log" 2>&1
  note "test_device_comm np $np: rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/comm_np$np.log" | tr '\n' ' ')"
done

tiny_config "$out/tiny.json"
"${mpi[@]}" -np 1 "$bundle/bin/ztrain" "$out/tiny.json" --device cpu --log-dir "$out/cpu" > "$out/cpu.log" 2>&1
"${mpi[@]}" -np 1 "$bundle/bin/ztrain" "$out/tiny.json" --device cuda --set bf16.enabled=true --log-dir "$out/gpu-bf16" > "$out/gpu-bf16.log" 2>&1
compare "bf16 GPU vs fp32 CPU, 50 steps" "$out/cpu/metrics.jsonl" "$out/gpu-bf16/metrics.jsonl" 0.02
for stage in 0 1 2 3; do
  for np in 1 2; do
    "${mpi[@]}" -np $np "$bundle/bin/ztrain" "$out/tiny.json" --device cuda --steps 20 \
      --set zero_optimization.stage=$stage --set zero_optimization.stage3_param_persistence_threshold=1000 \
      --log-dir "$out/z$stage-np$np" > "$out/z$stage-np$np.log" 2>&1 || note "stage $stage np $np: rc=$?"
    python3 - "$out/cpu/metrics.jsonl" "$out/z$stage-np$np/metrics.jsonl" > "$out/z$stage-np$np.cut" <<'PY'
import json, sys
a = [l for l in open(sys.argv[1]) if '"step"' in l][:20]
open(sys.argv[1] + ".20", "w").writelines(a)
PY
    compare "fp32 GPU ZeRO-$stage np $np vs CPU, 20 steps" "$out/cpu/metrics.jsonl.20" "$out/z$stage-np$np/metrics.jsonl" 1e-3
  done
done
grep -h "data-parallel communicator\|device cuda" "$out"/z*-np*.log | sort | uniq -c | tee -a "$summary"
# The step as CUDA graphs against the same steps operation by operation.
bash "$(dirname "$0")/check_graph.sh" "$bundle" "$out/graph" > /dev/null
cat "$out/graph/summary.txt" >> "$summary"
grep -h "CUDA graph of the step, " "$out/graph/summary.txt"
ZT_INJECT_FAULT="overflow:rank=0,step=3,unit=2" "${mpi[@]}" -x ZT_INJECT_FAULT -np 1 "$bundle/bin/ztrain" "$out/tiny.json" \
  --device cuda --steps 8 --set fp16.enabled=true --set fp16.hysteresis=1 --log-dir "$out/fp16" > "$out/fp16.log" 2>&1
note "fp16 on GPU: rc=$? scales $(grep -o '"loss_scale":[^,}]*' "$out/fp16/metrics.jsonl" | cut -d: -f2 | tr '\n' ' ') skipped $(grep -o '"skipped":[a-z]*' "$out/fp16/metrics.jsonl" | cut -d: -f2 | tr '\n' ' ')"
grep -h "peak memory" "$out/gpu-bf16.log" | tee -a "$summary"
grep -h "tok/s" "$out/gpu-bf16.log" | tail -1 | tee -a "$summary"
# [Note: activation offload]: the checkpoints in host memory through the copy
# streams give the bits of the same run without them (ZeRO-3, groups of 2,
# bf16, with and without the optimizer and the parameters on the CPU).
bits() { grep '"step"' "$1/metrics.jsonl" | grep -o '"loss":[^,]*,\|"grad_norm":[^,]*\|"val_loss":[^,}]*' | tr '\n' ' '; }
for mode in device offload; do
  sets=(--set zero_optimization.stage=3 --set bf16.enabled=true --set model.activation_checkpointing=true
        --set model.n_layer=6 --set train.breadth_first_group=2 --steps 8)
  [ $mode = offload ] && sets+=(--set 'zero_optimization.offload_optimizer.device="cpu"'
                                --set 'zero_optimization.offload_param.device="cpu"' --set offload.param_from_master=true)
  for c in false true; do
    "${mpi[@]}" -np 1 "$bundle/bin/ztrain" "$out/tiny.json" --device cuda "${sets[@]}" \
      --set activation_checkpointing.cpu_checkpointing=$c --log-dir "$out/cpuckpt-$mode-$c" > "$out/cpuckpt-$mode-$c.log" 2>&1
  done
  a=$(bits "$out/cpuckpt-$mode-false") b=$(bits "$out/cpuckpt-$mode-true")
  [ -n "$a" ] && [ "$a" = "$b" ] && v="same bits" || v="DIFFER: $b vs $a"
  note "checkpoints in host memory ($mode states): $v; $(grep -h '^peak memory' "$out/cpuckpt-$mode-true.log" | grep -o 'activations [0-9.]* MiB') (without: $(grep -h '^peak memory' "$out/cpuckpt-$mode-false.log" | grep -o 'activations [0-9.]* MiB'))"
done
# [Note: bf16 gradients on the host]: one rounding on the device (the cast
# kernel), the bf16 copy to the host, the host AdamW from bf16: stages 2 and
# 3 give one set of bits; fp32 gradients stay close.
for g in fp32 bf16-2 bf16-3; do
  st=${g#bf16-}; [ "$g" = fp32 ] && st=2
  gd=fp32; [ "$g" != fp32 ] && gd=bf16
  "${mpi[@]}" -np 1 "$bundle/bin/ztrain" "$out/tiny.json" --device cuda --steps 20 --set bf16.enabled=true \
    --set zero_optimization.stage=$st --set train.breadth_first_group=4 \
    --set 'zero_optimization.offload_optimizer.device="cpu"' --set "offload.grad_dtype=\"$gd\"" \
    --log-dir "$out/gdt-$g" > "$out/gdt-$g.log" 2>&1
done
a=$(bits "$out/gdt-bf16-2") b=$(bits "$out/gdt-bf16-3")
[ -n "$a" ] && [ "$a" = "$b" ] && v="same bits at stages 2 and 3" || v="DIFFER: $b vs $a"
note "bf16 gradients on the host: $v"
compare "bf16 gradients vs fp32 gradients, 20 steps" "$out/gdt-fp32/metrics.jsonl" "$out/gdt-bf16-2/metrics.jsonl" 0.01
