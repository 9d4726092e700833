#!/usr/bin/env bash
# Side-by-side benchmark on one GPU: ztrain's Llama against Hugging Face
# transformers' LlamaForCausalLM (sdpa attention, fused AdamW; eager and
# torch.compile) on the same shapes: the llama3.2-1b preset (16 layers, d 2048,
# 32 heads with 8 key/value heads, SwiGLU 8192, vocabulary 128,256, tied head)
# at seq 2048, bf16, random tokens. Prints tokens/s, peak memory and the ratio.
#
#   jobs/bench/llama.sh ZTRAIN_BINARY [OUT_DIR]
#   (MB=4 SEQ=2048 BENCH_STEPS=20 by default)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ztrain=${1:?usage: jobs/bench/llama.sh ZTRAIN_BINARY [OUT_DIR]}
out=${2:-bench-llama}
mb=${MB:-4} seq=${SEQ:-2048} steps=${BENCH_STEPS:-20}
mkdir -p "$out"
results="$out/results.jsonl"
: > "$results"
cat > "$out/llama-1b.json" <<JSON
{"train_micro_batch_size_per_gpu": $mb, "gradient_accumulation_steps": 1, "steps_per_print": 5,
 "gradient_clipping": 1.0, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.0003, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "model": {"preset": "llama3.2-1b", "seq_len": $seq}, "train": {"steps": $steps, "eval_interval": 0}}
JSON
# ZTRAIN_VARIANTS="flash cudnn" runs ztrain once per attention path
# (ZTRAIN_ATTENTION, docs/cuda.md); by default once, with the default path.
for variant in ${ZTRAIN_VARIANTS:-default}; do
  if [ "$variant" = default ]; then env=(); else env=(ZTRAIN_ATTENTION="$variant"); fi
  env "${env[@]}" "$ztrain" "$out/llama-1b.json" --device cuda --log-dir "$out/ztrain-$variant" \
    > "$out/ztrain-$variant.log" 2>&1
  rc=$?
  python3 - "$out/ztrain-$variant/metrics.jsonl" $rc "$variant" >> "$results" <<'PY'
import json, sys
path, rc, variant = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    recs = [json.loads(l) for l in open(path)]
except OSError:
    recs = []
steps = [r for r in recs if "step" in r and "tokens_per_s" in r]
end = [r for r in recs if r.get("event") == "end"]
print(json.dumps({"impl": "ztrain" + ("" if variant == "default" else "-" + variant), "label": "llama3.2-1b",
                  "rc": rc, "tokens_per_s": steps[-1]["tokens_per_s"] if steps else 0.0,
                  "loss": steps[-1]["loss"] if steps else None,
                  "peak_mem_gib": end[0]["peak_bytes"]["total"] / 2**30 if end else None}))
PY
done
for mode in "" "--compile"; do
  python3 "$here/torch_llama.py" --layers 16 --dim 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256 \
    --seq "$seq" --micro-batch "$mb" --tie --steps "$steps" --label llama3.2-1b $mode \
    >> "$results" 2> "$out/transformers$mode.log" ||
    echo "{\"impl\": \"transformers$mode\", \"label\": \"llama3.2-1b\", \"failed\": true}" >> "$results"
done
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for r in rows:
    if r.get("failed"):
        print(f"{r['impl']:22s} failed")
        continue
    mem = r.get("peak_mem_gib")
    print(f"{r['impl']:22s} {r['tokens_per_s']:>10,.0f} tok/s  peak {mem if mem is None else round(mem, 2)} GiB  loss {r.get('loss')}")
z = max((r for r in rows if r["impl"].startswith("ztrain")), key=lambda r: r["tokens_per_s"], default=None)
best = max((r for r in rows if r["impl"].startswith("transformers") and not r.get("failed")),
           key=lambda r: r["tokens_per_s"], default=None)
if z and best and z["tokens_per_s"] and z["peak_mem_gib"]:
    print(f"{z['impl']} / best transformers ({best['impl']}): {z['tokens_per_s'] / best['tokens_per_s']:.3f}x tokens/s, "
          f"{z['peak_mem_gib'] / best['peak_mem_gib']:.2f}x peak memory")
PY
