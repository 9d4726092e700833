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

tiny_config "$out/llama-tiny.json" llama-tiny
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

# Packed fine-tuning (data.packing): prompt/completion pairs of varied lengths
# tokenised with the repository's GPT-2 test tokenizer, several examples per
# row with document masking, Llama and GPT-2 on the GPU against the CPU.
python3 - "$out/ft.jsonl" <<'PY'
import json, random, sys
random.seed(7)
words = "the of and to in a is that for it as was with be by on not he this are or his from at which".split()
with open(sys.argv[1], "w") as f:
    for i in range(600):
        p = " ".join(random.choice(words) for _ in range(random.randint(1, 12)))
        c = " ".join(random.choice(words) for _ in range(random.randint(1, 40)))
        f.write(json.dumps({"prompt": p + ":", "completion": " " + c}) + "\n")
PY
"$bundle/bin/zdata" finetune --tokenizer tests/io/data/tok_gpt2.json --format prompt_completion --out "$out/ft" \
  "$out/ft.jsonl" > "$out/zdata.log" 2>&1 || note "zdata finetune: rc=$? $(tail -2 "$out/zdata.log")"
cat > "$out/pack.json" <<JSON
{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 8, "steps_per_print": 1, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "betas": [0.9, 0.95], "weight_decay": 0.0}},
 "model": {"n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 128, "vocab_size": 1200},
 "data": {"train": "$out/ft/train.bin", "packing": true}, "train": {"steps": 20, "eval_interval": 0}}
JSON
for arch in gpt2 llama; do
  set_arch=()
  [ $arch = llama ] && set_arch=(--set 'model.arch="llama"' --set model.num_key_value_heads=2 --set model.intermediate_size=128)
  for dev in cpu cuda; do
    "${mpi[@]}" -np 1 "$bundle/bin/ztrain" "$out/pack.json" --device $dev "${set_arch[@]}" \
      --log-dir "$out/pack-$arch-$dev" > "$out/pack-$arch-$dev.log" 2>&1 || note "pack $arch $dev: rc=$?"
  done
  compare "packed fine-tuning $arch fp32 GPU vs CPU, 20 steps" "$out/pack-$arch-cpu/metrics.jsonl" \
    "$out/pack-$arch-cuda/metrics.jsonl" 1e-3
  grep -h "packing" "$out/pack-$arch-cuda.log" | head -2 | tee -a "$summary"
done

if [ $bench = 1 ]; then
  jobs/bench/llama.sh "$bundle/bin/ztrain" "$out/bench" 2>&1 | tee -a "$summary"
fi
