#!/usr/bin/env bash
# ZeRO-Offload on one GPU (docs/offload.md), in one call:
#   - the 1.3B preset (24 layers, d 2048, seq 1024), bf16, micro-batch 8,
#     ZeRO-2: no offload, CPU optimizer offload, and the delayed update, at
#     gradient accumulation 1 and 8;
#   - under a 24 GiB device cap (train.device_memory_cap_gib), ZeRO-3 with
#     the optimizer and the parameters on the CPU and activation
#     checkpointing: GPTs of growing size until one does not fit (CAP_RUNS
#     picks sizes, accumulation and the delayed update);
#   - NVMe (optimizer on NVMe files; pnvme: ZeRO-3 with the parameters on
#     NVMe and the optimizer on the CPU) when OFFLOAD_NVME_DIR is set;
#   - parity: the tiny model on the GPU, 20 steps, with each offload mode
#     against no offload: the loss bits must be equal (parity.txt).
# Each run's tokens/s is the mean over the steps after the first two (after
# the delayed update's warm-up); the offload phases come from
# wall_clock_breakdown. A table is printed last (results.tsv), then, for
# each capped run with a device-alone run of its shape (CAP_DEVICE_ALONE=1),
# its step against that bound.
#
#   jobs/bench/offload.sh ZTRAIN OUT_DIR [PLAN...]   (plans: parity z2 z2a1 z2a1off z2a8 z2acc z2bf z2g16 cap nvme pnvme; default parity z2 cap)
#   RUN_TIMEOUT=S bounds each run (default 600 s).
set -uo pipefail
ztrain=${1:?usage: offload.sh ZTRAIN OUT_DIR [PLAN...]}
out=${2:?}
shift 2
plans=${*:-parity z2 cap}
mkdir -p "$out"
results="$out/results.tsv"
printf 'run\tparams\ttokens_per_s\tstep_ms\tmfu\tdevice_peak_gib\tpinned_gib\tpageable_gib\thost_adamw_ms\tloss\trc\n' > "$results"

config() {  # config NAME LAYERS DIM HEADS MICRO ACCUM STEPS
  cat > "$out/$1.json" <<JSON
{"train_micro_batch_size_per_gpu": $5, "gradient_accumulation_steps": $6, "steps_per_print": 1,
 "gradient_clipping": 1.0, "bf16": {"enabled": true}, "wall_clock_breakdown": true,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.0001, "betas": [0.9, 0.999], "weight_decay": 0.01}},
 "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none", "pin_memory": true},
                       "offload_param": {"device": "none", "pin_memory": true, "buffer_size": 300000000}},
 "model": {"n_layer": $2, "d_model": $3, "n_head": $4, "seq_len": 1024, "vocab_size": 50304},
 "train": {"steps": $7, "eval_interval": 0}}
JSON
}

run() {  # run NAME CONFIG SKIP SETTINGS...: SKIP = steps left out of the mean
  local name=$1 cfg=$2 skip=$3
  shift 3
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  timeout "${RUN_TIMEOUT:-600}" "$ztrain" "$out/$cfg.json" --device cuda --log-dir "$out/$name" "${sets[@]}" \
    > "$out/$name.log" 2>&1
  local rc=$?
  python3 - "$out/$name/metrics.jsonl" "$name" "$skip" "$rc" "$out/$name.log" >> "$results" <<'PY'
import json, re, statistics, sys
path, name, skip, rc, log = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
try:
    recs = [json.loads(l) for l in open(path)]
except OSError:
    recs = []
steps = [r for r in recs if "tokens_per_s" in r and r.get("step", 0) > skip]
end = [r for r in recs if r.get("event") == "end"]
text = open(log, errors="replace").read()
m = re.search(r"([0-9,]+) parameters", text)
params = int(m.group(1).replace(",", "")) if m else 0
tok = statistics.mean(r["tokens_per_s"] for r in steps) if steps else 0.0
cfgm = re.search(r"micro (\d+) x accum (\d+)", text)
tokens = int(cfgm.group(1)) * int(cfgm.group(2)) * 1024 if cfgm else 0
ms = 1000.0 * tokens / tok if tok else 0.0
# Model FLOPs per token: 6N + 12 L d T (positions and the tied embedding counted once), peak 790 TFLOP/s bf16 dense.
lm = re.search(r"(\d+) layers, d_model (\d+)", text)
L, d = (int(lm.group(1)), int(lm.group(2))) if lm else (0, 0)
mfu = tok * (6 * params + 12 * L * d * 1024) / 790e12 if tok else 0.0
peak = end[0]["peak_bytes"]["total"] / 2**30 if end else 0.0
host = end[0].get("peak_host_bytes", {}) if end else {}
adam = [r["offload"]["host_adamw_s"] * 1e3 for r in steps if "offload" in r]
loss = steps[-1]["loss"] if steps else float("nan")
print(f"{name}\t{params}\t{tok:.0f}\t{ms:.1f}\t{mfu:.3f}\t{peak:.2f}\t{host.get('pinned', 0) / 2**30:.2f}\t"
      f"{host.get('pageable', 0) / 2**30:.2f}\t{statistics.median(adam) if adam else 0:.1f}\t{loss:.4f}\t{rc}")
PY
  grep -E "error|offload" "$out/$name.log" | tail -3
}

CPU='zero_optimization.offload_optimizer.device="cpu"'
DELAY=(offload.delayed_update=true offload.delayed_update_warmup=2)
for plan in $plans; do
  case $plan in
    parity)
      cat > "$out/tiny.json" <<'JSON'
{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 8, "steps_per_print": 1, "gradient_clipping": 1.0,
 "bf16": {"enabled": true}, "zero_optimization": {"stage": 2},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "model": {"preset": "tiny"}, "train": {"steps": 20, "eval_interval": 0}}
JSON
      curve() { grep '"step"' "$1/metrics.jsonl" | grep -o '"loss":[^,}]*' | cut -d: -f2 | tr '\n' ' '; }
      for st in 2 3; do
        "$ztrain" "$out/tiny.json" --device cuda --log-dir "$out/par-$st-none" --set zero_optimization.stage=$st \
          > "$out/par-$st-none.log" 2>&1
        ref=$(curve "$out/par-$st-none")
        for mode in cpu cpu-params delayed; do
          sets=(--set zero_optimization.stage=$st --set "$CPU")
          [ $mode = cpu-params ] && sets+=(--set 'zero_optimization.offload_param.device="cpu"')
          [ $mode = delayed ] && sets+=(--set offload.delayed_update=true --set offload.delayed_update_warmup=5)
          [ $mode = cpu-params ] && [ $st != 3 ] && continue
          "$ztrain" "$out/tiny.json" --device cuda --log-dir "$out/par-$st-$mode" "${sets[@]}" > "$out/par-$st-$mode.log" 2>&1
          got=$(curve "$out/par-$st-$mode")
          if [ $mode = delayed ]; then
            a=$(echo "$ref" | cut -d' ' -f1-6); b=$(echo "$got" | cut -d' ' -f1-6)
            [ -n "$a" ] && [ "$a" = "$b" ] && v="steps 1-6 equal" || v="DIFFER: $b vs $a"
            v="$v; step 20 $(echo "$got" | awk '{print $NF}') vs exact $(echo "$ref" | awk '{print $NF}')"
          else
            [ -n "$ref" ] && [ "$ref" = "$got" ] && v="equal bits (20 steps)" || v="DIFFER: $got vs $ref"
          fi
          echo "parity stage $st offload $mode: $v" | tee -a "$out/parity.txt"
        done
      done
      ;;
    z2)
      config b13-a1 24 2048 16 8 1 10
      config b13-a8 24 2048 16 8 8 5
      run 1.3b-z2-a1 b13-a1 2
      run 1.3b-z2-cpu-a1 b13-a1 2 "$CPU"
      run 1.3b-z2-cpu-delayed-a1 b13-a1 3 "$CPU" "${DELAY[@]}"
      run 1.3b-z2-a8 b13-a8 1
      run 1.3b-z2-cpu-a8 b13-a8 1 "$CPU"
      run 1.3b-z2-cpu-delayed-a8 b13-a8 3 "$CPU" "${DELAY[@]}"
      ;;
    z2a1|z2a1off)
      # Accumulation 1 only: no offload (not with z2a1off), exact, delayed.
      config b13-a1 24 2048 16 8 1 10
      [ "$plan" = z2a1 ] && run 1.3b-z2-a1 b13-a1 2
      run 1.3b-z2-cpu-a1 b13-a1 2 "$CPU"
      run 1.3b-z2-cpu-delayed-a1 b13-a1 3 "$CPU" "${DELAY[@]}"
      ;;
    z2a8)
      # Accumulation 8 one micro-batch at a time (the host adds seven
      # landed pieces a step), beside no offload.
      config b13-a8 24 2048 16 8 8 5
      run 1.3b-z2-a8 b13-a8 1
      run 1.3b-z2-cpu-a8 b13-a8 1 "$CPU"
      ;;
    z2acc)
      # Accumulation 8 with the micro-batches added on the device
      # (offload.grad_accumulation "device"), beside no offload.
      config b13-a8 24 2048 16 8 8 5
      DEVACC='offload.grad_accumulation="device"'
      run 1.3b-z2-a8 b13-a8 1
      run 1.3b-z2-cpu-a8-devacc b13-a8 1 "$CPU" "$DEVACC"
      run 1.3b-z2-cpu-delayed-a8-devacc b13-a8 3 "$CPU" "$DEVACC" "${DELAY[@]}"
      ;;
    z2bf)
      # Accumulation 8 in one breadth-first group of 8 (train.
      # breadth_first_group): each unit's gradient sums the 8 micro-batches
      # and lands on the host once, spread over the backward; beside no
      # offload.
      config b13-a8 24 2048 16 8 8 5
      BF=train.breadth_first_group=8
      run 1.3b-z2-a8 b13-a8 1
      run 1.3b-z2-cpu-a8-bf8 b13-a8 1 "$CPU" "$BF"
      run 1.3b-z2-cpu-delayed-a8-bf8 b13-a8 3 "$CPU" "$BF" "${DELAY[@]}"
      ;;
    z2g16)
      # offload.grad_dtype "bf16" ([Note: bf16 gradients on the host]) beside
      # fp32 gradients: accumulation 1 exact and delayed, accumulation 8 in
      # one breadth-first group of 8.
      config b13-a1 24 2048 16 8 1 10
      config b13-a8 24 2048 16 8 8 5
      G16='offload.grad_dtype="bf16"'
      BF=train.breadth_first_group=8
      run 1.3b-z2-cpu-a1 b13-a1 2 "$CPU"
      run 1.3b-z2-cpu-a1-g16 b13-a1 2 "$CPU" "$G16"
      run 1.3b-z2-cpu-delayed-a1-g16 b13-a1 3 "$CPU" "$G16" "${DELAY[@]}"
      run 1.3b-z2-cpu-a8-bf8-g16 b13-a8 1 "$CPU" "$BF" "$G16"
      ;;
    cap)
      # 24 GiB cap, ZeRO-3, optimizer and parameters on the CPU, checkpointing.
      CAP=(train.device_memory_cap_gib=24 zero_optimization.stage=3 "$CPU"
           'zero_optimization.offload_param.device="cpu"' model.activation_checkpointing=true)
      # CAP_RUNS: SIZE:ACCUM[:delayed|exact[:MICRO[:RECOMPUTE[:GROUP[:pfm]]]]]
      # entries (default: each size at accumulation 1); micro-batch 8 unless
      # given, so accumulation 8 is 64k tokens a step; RECOMPUTE sets
      # model.recompute_layers (default, or empty: every block recomputes),
      # GROUP train.breadth_first_group (default 1), pfm
      # offload.param_from_master. CAP_DEVICE_ALONE=1 runs each entry first
      # without offload and without the cap (the device's compute alone).
      # CAP_SETS: more settings for the capped runs (not the device-alone
      # ones), e.g. activation_checkpointing.cpu_checkpointing=true.
      declare -A shape=([2.7b]="32 2560 32" [3.8b]="32 3072 24" [4.6b]="36 3200 25" [6.2b]="30 4096 32"
                        [6.7b]="32 4096 32")
      for r in ${CAP_RUNS:-2.7b:1 3.8b:1 4.6b:1 6.2b:1 6.7b:1}; do
        IFS=: read -r size acc mode micro rec group pfm <<< "$r"
        micro=${micro:-8}
        steps=$((acc == 1 ? 5 : 4))
        name="$size-cap24-z3-cpu-cpu-mb$micro-a$acc"
        extra=()
        if [ -n "${rec:-}" ]; then
          name="$name-rec$rec"
          extra+=(model.recompute_layers="$rec")
        fi
        if [ -n "${group:-}" ] && [ "$group" != 1 ]; then
          name="$name-bf$group"
          extra+=(train.breadth_first_group="$group")
        fi
        if [ "${pfm:-}" = pfm ]; then
          name="$name-pfm"
          extra+=(offload.param_from_master=true)
        fi
        config "c$size-mb$micro-a$acc" ${shape[$size]} "$micro" "$acc" "$steps"
        if [ "${CAP_DEVICE_ALONE:-0}" = 1 ]; then
          # The device's compute alone, the bound's first term: the same
          # model, micro-batch, groups and checkpointing with every state on
          # the device and no cap (6.25B needs about 105 GiB there).
          dev_extra=()
          for e in "${extra[@]}"; do [ "$e" = offload.param_from_master=true ] || dev_extra+=("$e"); done
          run "$size-z3-device-alone-mb$micro-a$acc${group:+-bf$group}" "c$size-mb$micro-a$acc" 2 \
            zero_optimization.stage=3 model.activation_checkpointing=true "${dev_extra[@]}"
        fi
        for e in ${CAP_SETS:-}; do extra+=("$e"); done
        [ -n "${CAP_SETS:-}" ] && name="$name-sets"
        if [ "$mode" = delayed ]; then
          run "$name-delayed" "c$size-mb$micro-a$acc" 3 "${CAP[@]}" "${extra[@]}" "${DELAY[@]}"
        else
          run "$name" "c$size-mb$micro-a$acc" 2 "${CAP[@]}" "${extra[@]}"
        fi
      done
      ;;
    nvme)
      [ -n "${OFFLOAD_NVME_DIR:-}" ] || { echo "nvme plan: set OFFLOAD_NVME_DIR"; continue; }
      config b13-a1n 24 2048 16 8 1 3
      run 1.3b-z2-nvme-a1 b13-a1n 1 'zero_optimization.offload_optimizer.device="nvme"' \
        "zero_optimization.offload_optimizer.nvme_path=\"$OFFLOAD_NVME_DIR\"" \
        zero_optimization.offload_optimizer.pipeline_read=true zero_optimization.offload_optimizer.pipeline_write=true \
        zero_optimization.sub_group_size=100000000 zero_optimization.offload_optimizer.buffer_count=6
      ;;
    pnvme)
      # ZeRO-3, the optimizer on the CPU, every parameter shard in the NVMe
      # file (max_in_cpu 0): each step reads the shards for the forward and
      # the backward (those not kept gathered) and writes the updated ones.
      [ -n "${OFFLOAD_NVME_DIR:-}" ] || { echo "pnvme plan: set OFFLOAD_NVME_DIR"; continue; }
      config b13-a1p 24 2048 16 8 1 6
      run 1.3b-z3-pnvme-a1 b13-a1p 2 zero_optimization.stage=3 "$CPU" 'zero_optimization.offload_param.device="nvme"' \
        "zero_optimization.offload_param.nvme_path=\"$OFFLOAD_NVME_DIR\"" zero_optimization.offload_param.max_in_cpu=0 \
        zero_optimization.offload_param.buffer_count=${PNVME_BUFFERS:-8}
      python3 - "$out/1.3b-z3-pnvme-a1/metrics.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    o = r.get("offload", {})
    if "tokens_per_s" in r and "param_read_bytes" in o:
        print(f"pnvme step {r['step']}: {8192 / r['tokens_per_s']:.3f} s, parameters read {o['param_read_bytes'] / 1e9:.2f} GB "
              f"(waited {o.get('param_read_wait_s', 0):.2f} s), written {o['param_write_bytes'] / 1e9:.2f} GB "
              f"(waited {o.get('param_write_wait_s', 0):.2f} s)")
PY
      ;;
  esac
done
cat "$results"
# Each capped run's step against the device-alone run of the same size,
# micro-batch, accumulation and groups (CAP_DEVICE_ALONE=1): the step /
# bound ratio when the device's compute is the slowest resource.
python3 - "$results" <<'PY'
import csv, re, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
alone = {}
for r in rows:
    m = re.match(r"(.+)-z3-device-alone-mb(\d+)-a(\d+)(?:-bf(\d+))?$", r["run"])
    if m and float(r["step_ms"]) > 0:
        alone[m.groups()] = float(r["step_ms"])
for r in rows:
    m = re.match(r"(.+)-cap24-z3-cpu-cpu-mb(\d+)-a(\d+)(?:-rec\d+)?(?:-bf(\d+))?", r["run"])
    if m and m.groups() in alone and float(r["step_ms"]) > 0:
        print(f"{r['run']}: step {float(r['step_ms']):.0f} ms, device alone {alone[m.groups()]:.0f} ms, "
              f"{float(r['step_ms']) / alone[m.groups()]:.3f}x")
PY
