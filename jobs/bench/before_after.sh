#!/usr/bin/env bash
# Step time of two ztrain binaries side by side on one GPU, in one call:
# GPT-2 124M (seq 1024, micro-batch 16) and the 1.3B preset (24 layers,
# d 2048, micro-batch 8), bf16, one micro-batch per step, plus 124M with 4
# micro-batches per step; and on request the llama3.2-1b preset (seq 2048,
# micro-batch 4). Runs alternate A, B, A, B so drift hits both alike;
# each run takes BENCH_STEPS steps (default 30) printed every 10, and its
# tokens/s is the mean over the windows after the first (steps 11..).
# BENCH_CASES picks cases (default: gpt2-124m-mb16 gpt2-1.3b-mb8
# gpt2-124m-mb16x4; also llama3.2-1b-mb4, gpt2-124m-mb16-z3 at ZeRO stage
# 3, gpt2-1.3b-mb8-z2 and gpt2-1.3b-mb8-z3). The last loss of every run is
# printed in full, so that binaries meant to compute the same bits can be
# compared.
#
#   jobs/bench/before_after.sh ZTRAIN_A ZTRAIN_B OUT_DIR [rounds]
set -uo pipefail
a=${1:?usage: before_after.sh ZTRAIN_A ZTRAIN_B OUT_DIR [rounds]}
b=${2:?}
out=${3:?}
rounds=${4:-2}
steps=${BENCH_STEPS:-30}
mkdir -p "$out"
results="$out/results.tsv"
printf 'case\tbinary\tround\ttokens_per_s\tstep_ms\tpeak_gib\tloss\n' > "$results"

config() {  # config NAME PRESET MICRO ACCUM [SEQ [ZERO_STAGE]]
  echo "${5:-1024}" > "$out/$1.seq"
  cat > "$out/$1.json" <<JSON
{"train_micro_batch_size_per_gpu": $3, "gradient_accumulation_steps": $4, "steps_per_print": 10,
 "zero_optimization": {"stage": ${6:-0}},
 "gradient_clipping": 1.0, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.0003, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "model": {"preset": "$2", "seq_len": ${5:-1024}}, "train": {"steps": $steps, "eval_interval": 0}}
JSON
}
config gpt2-124m-mb16 gpt2-124m 16 1
config gpt2-1.3b-mb8 gpt2-1.3b 8 1
config gpt2-124m-mb16x4 gpt2-124m 16 4
config llama3.2-1b-mb4 llama3.2-1b 4 1 2048
config gpt2-124m-mb16-z3 gpt2-124m 16 1 1024 3
config gpt2-1.3b-mb8-z2 gpt2-1.3b 8 1 1024 2
config gpt2-1.3b-mb8-z3 gpt2-1.3b 8 1 1024 3

measure() {  # measure CASE LABEL BINARY ROUND
  local dir="$out/$1-$2-r$4"
  "$3" "$out/$1.json" --device cuda --log-dir "$dir" > "$dir.log" 2>&1
  python3 - "$dir/metrics.jsonl" "$1" "$2" "$4" >> "$results" <<'PY'
import json, sys
path, case, label, rnd = sys.argv[1:5]
try:
    recs = [json.loads(l) for l in open(path)]
except OSError:
    recs = []
steps = [r for r in recs if "tokens_per_s" in r and r.get("step", 0) > 10]
end = [r for r in recs if r.get("event") == "end"]
base = path.rsplit("/", 2)[0] + "/" + case
cfg = json.load(open(base + ".json"))
tokens = cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * int(open(base + ".seq").read())
tok = sum(r["tokens_per_s"] for r in steps) / len(steps) if steps else 0.0
ms = 1000.0 * tokens / tok if tok else 0.0
peak = end[0]["peak_bytes"]["total"] / 2**30 if end else 0.0
loss = steps[-1]["loss"] if steps else float("nan")
print(f"{case}\t{label}\t{rnd}\t{tok:.0f}\t{ms:.2f}\t{peak:.2f}\t{loss!r}")
PY
}

for c in ${BENCH_CASES:-gpt2-124m-mb16 gpt2-1.3b-mb8 gpt2-124m-mb16x4}; do
  n=$rounds
  [ "$c" = gpt2-124m-mb16x4 ] && n=1
  for r in $(seq 1 "$n"); do
    measure "$c" A "$a" "$r"
    measure "$c" B "$b" "$r"
  done
done

python3 - "$results" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
print(f"{'case':<18} {'A step ms':>10} {'B step ms':>10} {'B/A':>6} {'A tok/s':>9} {'B tok/s':>9} {'A GiB':>6} {'B GiB':>6}")
for case in dict.fromkeys(r["case"] for r in rows):
    def best(label, key):
        vals = [float(r[key]) for r in rows if r["case"] == case and r["binary"] == label and float(r["tokens_per_s"]) > 0]
        if not vals:
            return 0.0
        return min(vals) if key == "step_ms" else max(vals)
    a, b = best("A", "step_ms"), best("B", "step_ms")
    print(f"{case:<18} {a:>10.2f} {b:>10.2f} {b / a if a else 0:>6.3f} {best('A', 'tokens_per_s'):>9.0f} "
          f"{best('B', 'tokens_per_s'):>9.0f} {best('A', 'peak_gib'):>6.2f} {best('B', 'peak_gib'):>6.2f}")
    losses = {label: sorted({r["loss"] for r in rows if r["case"] == case and r["binary"] == label}) for label in "AB"}
    print(f"{'':<18} last loss A {', '.join(losses['A'])}; B {', '.join(losses['B'])}")
PY
