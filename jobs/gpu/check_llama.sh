#!/usr/bin/env bash
# GPU host checks of the Llama architecture (see docs/llama.md): the parity
# tests of grouped-query attention with document masking and of the Llama
# kernels, training llama-tiny on the GPU against the fp32 CPU loss curve
# (fp32 and bf16; ZeRO-3 on one and two ranks), packed fine-tuning data with
# document masking against the CPU, then the llama3.2-1b benchmark against
# transformers (jobs/bench/llama.sh).
# Usage (on the GPU host, from the repository root):
#   jobs/gpu/check_llama.sh BUNDLE_DIR OUT_DIR [--no-bench]
set -uo pipefail
# shellcheck source=jobs/gpu/lib.sh
. "$(dirname "$0")/lib.sh" check_llama.sh "$@"
bench=1
[ "${3:-}" = "--no-bench" ] && bench=0

for t in cuda_attention_parity cuda_llama_parity; do
  [ -x "$bundle/bin/$t" ] || { note "$t: missing"; continue; }
  "$bundle/bin/$t" > "$out/$t.log" 2>&1
  note "$t: rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$t.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$out/$t.log" | head -20 | tee -a "$summary"
done
grep -h "docs=1\|NKV" "$out/cuda_attention_parity.log" | head -12 | tee -a "$summary"

cat > "$out/llama-tiny.json" <<'JSON'
{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 8, "steps_per_print": 1, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.003, "warmup_num_steps": 10, "warmup_type": "linear"}},
 "model": {"preset": "llama-tiny"}, "train": {"steps": 50, "eval_interval": 0}}
JSON
run() {  # run NAME NP ARGS...: ztrain on llama-tiny.json into OUT/NAME
  local name=$1 np=$2
  shift 2
  "${mpi[@]}" -np "$np" "$bundle/bin/ztrain" "$out/llama-tiny.json" --log-dir "$out/$name" "$@" > "$out/$name.log" 2>&1 ||
    { note "$name: rc=$?"; tail -5 "$out/$name.log" | tee -a "$summary"; }
}
run cpu 1 --device cpu
run gpu-f32 1 --device cuda
run gpu-bf16 1 --device cuda --set bf16.enabled=true
compare "llama-tiny fp32 GPU vs fp32 CPU, 50 steps" "$out/cpu/metrics.jsonl" "$out/gpu-f32/metrics.jsonl" 1e-3
compare "llama-tiny bf16 GPU vs fp32 CPU, 50 steps" "$out/cpu/metrics.jsonl" "$out/gpu-bf16/metrics.jsonl" 0.02
for np in 1 2; do
  run "z3-np$np" $np --device cuda --set zero_optimization.stage=3 --set zero_optimization.stage3_param_persistence_threshold=100
  compare "llama-tiny fp32 GPU ZeRO-3 np $np vs CPU" "$out/cpu/metrics.jsonl" "$out/z3-np$np/metrics.jsonl" 1e-3
done

# Packed fine-tuning: a JSONL of prompt/completion pairs of varied lengths,
# packed with document masking, on the CPU and on the GPU.
if [ -x "$bundle/bin/zdata" ] && [ -n "${PACK_KEY:-}" ]; then
  python3 - "$out/ft.jsonl" <<'PY'
import json, random, sys
random.seed(7)
words = "the of and to in a is that for it as was with be by on not he this are or his from at which".split()
with open(sys.argv[1], "w") as f:
    for i in range(400):
        p = " ".join(random.choice(words) for _ in range(random.randint(1, 12)))
        c = " ".join(random.choice(words) for _ in range(random.randint(1, 20)))
        f.write(json.dumps({"prompt": p, "completion": c}) + "\n")
PY
  "$bundle/bin/zdata" finetune --input "$out/ft.jsonl" --tokenizer byte --out "$out/ft" > "$out/zdata.log" 2>&1 ||
    note "zdata finetune: rc=$? $(tail -2 "$out/zdata.log")"
  run pack-cpu 1 --device cpu --steps 20 --set "data.train=$out/ft/train.bin" --set "$PACK_KEY"
  run pack-gpu 1 --device cuda --steps 20 --set "data.train=$out/ft/train.bin" --set "$PACK_KEY"
  compare "packed fine-tuning fp32 GPU vs CPU, 20 steps" "$out/pack-cpu/metrics.jsonl" "$out/pack-gpu/metrics.jsonl" 1e-3
fi

if [ $bench = 1 ]; then
  jobs/bench/llama.sh "$bundle/bin/ztrain" "$out/bench" 2>&1 | tee -a "$summary"
fi
