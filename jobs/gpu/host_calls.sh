#!/usr/bin/env bash
# GPU host check of [Note: host round trips] (runtime/host_calls.hpp): runs
# ztrain with ZTRAIN_COUNT_HOST_CALLS=1 (CUPTI driver-API callbacks; the
# bundle's lib/ must hold libcupti) on GPT-2 124M and the 1B Llama, bf16, and
# checks that from step 2 on neither the walk (first forward to the gradient
# reduction) nor the reduction (to the optimizer step; [Note: verdict on the
# device]) makes a synchronize, blocking copy, device-to-host copy or
# allocation.
# Usage (on the GPU host, from the repository root):
#   jobs/gpu/host_calls.sh BUNDLE_DIR OUT_DIR
set -uo pipefail
# shellcheck source=jobs/gpu/lib.sh
. "$(dirname "$0")/lib.sh" host_calls.sh "$@"
fail=0
run() {  # run NAME PRESET MB SEQ EXTRA_SETTINGS...
  local name=$1 preset=$2 mb=$3 seq=$4
  shift 4
  cat > "$out/$name.json" <<JSON
{"train_micro_batch_size_per_gpu": $mb, "gradient_accumulation_steps": 2, "steps_per_print": 1,
 "gradient_clipping": 1.0, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.0003, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "model": {"preset": "$preset", "seq_len": $seq}, "train": {"steps": 6, "eval_interval": 0}}
JSON
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  ZTRAIN_COUNT_HOST_CALLS=1 "$bundle/bin/ztrain" "$out/$name.json" --device cuda --log-dir "$out/$name" "${sets[@]}" \
    > "$out/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || { note "$name: ztrain rc=$rc"; tail -5 "$out/$name.log" | tee -a "$summary"; fail=1; return; }
  python3 - "$out/$name.log" "$name" <<'PY' | tee -a "$summary"
import re, sys
log, name = sys.argv[1], sys.argv[2]
lines = [l for l in open(log, errors="replace") if "host calls in step" in l]
bad = 0
for l in lines:
    m = re.search(r"host calls in step (\d+): walk: (\d+) syncs, (\d+) blocking copies, (\d+) device-to-host copies, (\d+) allocations(.*?); reduction: (.*)$", l)
    if not m:
        print(f"{name}: unparsed line {l.strip()}"); bad = 1; continue
    step, counts = int(m.group(1)), [int(m.group(i)) for i in range(2, 6)]
    print(f"{name} step {step}: walk {sum(counts)} calls{m.group(6)}; reduction: {m.group(7).strip()}")
    reduction = [int(x) for x in re.findall(r"(\d+) (?:syncs|blocking copies|device-to-host copies|allocations)", m.group(7))]
    if step >= 2 and (sum(counts) != 0 or len(reduction) != 4 or sum(reduction) != 0):
        bad = 1
if not lines:
    print(f"{name}: no 'host calls' lines"); bad = 1
print(f"{name}: {'FAIL' if bad else 'ok'} (walk and reduction windows from step 2 on without host round trips)")
sys.exit(bad)
PY
  [ "${PIPESTATUS[0]}" -eq 0 ] || fail=1
}
run gpt2-124m gpt2-124m 8 1024
run gpt2-124m-zero3 gpt2-124m 8 1024 zero_optimization.stage=3
run llama-1b llama3.2-1b 2 2048
exit $fail
