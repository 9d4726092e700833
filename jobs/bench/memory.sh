#!/usr/bin/env bash
# The memory estimator against measured peaks on one GPU (docs/memory.md):
# for each case, `ztrain --dry-run` gives the estimate (each column and the
# device total, the pinned and pageable host memory, the NVMe files) and a
# 3-step run the end record's peaks (each tag, the total, the host's and
# the swap files'). Prints one line per case with the estimate / measured
# ratio of the device total, of the host's and of the NVMe bytes, each
# device column beside them, and writes OUT_DIR/memory.tsv.
#
#   jobs/bench/memory.sh ZTRAIN OUT_DIR [CASE...]
#
# Cases (GPT-2 shapes, bf16, seq 1024): z2, z2-cpu, z3, z3-cpu-cpu and
# z3-group (ZeRO-3, both offloads, parameters from the master, bf16
# gradients, one breadth-first group of 8 with the checkpoints in host
# memory) at the 1.3B preset's shape (24 layers, d 2048, micro-batch 8);
# z3-350m and z3-cpu-cpu-350m at 350M's (24 layers, d 1024, micro-batch 16),
# small enough that DeepSpeed's default reuse distance keeps every unit
# gathered after its backward; z3-pageable-350m (both offloads without
# pin_memory) and z3-nvme-350m (both on NVMe files under MEMORY_NVME_DIR,
# default OUT_DIR/nvme) there too. Default: all. RUN_TIMEOUT=S bounds each
# run (default 300 s); --device cuda unless ZTRAIN_DEVICE says otherwise.
set -uo pipefail
ztrain=${1:?usage: memory.sh ZTRAIN OUT_DIR [CASE...]}
out=${2:?usage: memory.sh ZTRAIN OUT_DIR [CASE...]}
shift 2
cases=${*:-z2 z2-cpu z3 z3-cpu-cpu z3-group z3-350m z3-cpu-cpu-350m z3-pageable-350m z3-nvme-350m}
device=${ZTRAIN_DEVICE:-cuda}
mkdir -p "$out"
tsv="$out/memory.tsv"
printf 'case\testimate_gib\tmeasured_gib\tratio\thost and NVMe estimate/measured GiB (ratio)\tdevice columns (estimate/measured GiB)\n' > "$tsv"

config() {  # config FILE LAYERS DIM HEADS MICRO ACCUM
  cat > "$1" <<JSON
{"train_micro_batch_size_per_gpu": $5, "gradient_accumulation_steps": $6, "steps_per_print": 1,
 "gradient_clipping": 1.0, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 0.0001, "betas": [0.9, 0.999], "weight_decay": 0.01}},
 "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none", "pin_memory": true},
                       "offload_param": {"device": "none", "pin_memory": true, "buffer_size": 300000000}},
 "model": {"n_layer": $2, "d_model": $3, "n_head": $4, "seq_len": 1024, "vocab_size": 50304},
 "train": {"steps": 3, "eval_interval": 0}}
JSON
}
config "$out/b13.json" 24 2048 16 8 1
config "$out/b13a8.json" 24 2048 16 8 8
config "$out/m350.json" 24 1024 16 16 1

nvme=${MEMORY_NVME_DIR:-$out/nvme}  # the swap files of the NVMe case
mkdir -p "$nvme"
CPU='zero_optimization.offload_optimizer.device="cpu"'
PARAM='zero_optimization.offload_param.device="cpu"'
for c in $cases; do
  case $c in
    z2) cfg=b13; sets=(zero_optimization.stage=2) ;;
    z2-cpu) cfg=b13; sets=(zero_optimization.stage=2 "$CPU") ;;
    z3) cfg=b13; sets=(zero_optimization.stage=3) ;;
    z3-cpu-cpu) cfg=b13; sets=(zero_optimization.stage=3 "$CPU" "$PARAM") ;;
    z3-group) cfg=b13a8; sets=(zero_optimization.stage=3 "$CPU" "$PARAM" offload.param_from_master=true
                               'offload.grad_dtype="bf16"' train.breadth_first_group=8 model.activation_checkpointing=true
                               activation_checkpointing.cpu_checkpointing=true) ;;
    z3-350m) cfg=m350; sets=(zero_optimization.stage=3) ;;
    z3-cpu-cpu-350m) cfg=m350; sets=(zero_optimization.stage=3 "$CPU" "$PARAM") ;;
    z3-pageable-350m) cfg=m350; sets=(zero_optimization.stage=3 "$CPU" "$PARAM" zero_optimization.offload_optimizer.pin_memory=false
                                      zero_optimization.offload_param.pin_memory=false) ;;
    z3-nvme-350m) cfg=m350; sets=(zero_optimization.stage=3 'zero_optimization.offload_optimizer.device="nvme"'
                                  'zero_optimization.offload_param.device="nvme"'
                                  "zero_optimization.offload_optimizer.nvme_path=\"$nvme\""
                                  "zero_optimization.offload_param.nvme_path=\"$nvme\"") ;;
    *) echo "memory.sh: unknown case '$c'" >&2; exit 2 ;;
  esac
  args=()
  for s in "${sets[@]}"; do args+=(--set "$s"); done
  "$ztrain" "$out/$cfg.json" --dry-run --device "$device" "${args[@]}" > "$out/$c.dry.txt" 2>&1
  timeout "${RUN_TIMEOUT:-300}" "$ztrain" "$out/$cfg.json" --device "$device" --log-dir "$out/$c" "${args[@]}" \
    > "$out/$c.log" 2>&1
  python3 - "$out/$c.dry.txt" "$out/$c/metrics.jsonl" "$c" >> "$tsv" <<'PY'
import json, sys
dry, metrics, name = sys.argv[1:4]
labels = {"params": "parameters (working", "grads": "gradients (fp32)", "optim": "optimizer (master",
          "activations": "activations", "comm": "communication buckets", "workspace": "workspace",
          "total": "device total", "pinned": "pinned host memory", "pageable": "pageable host memory",
          "nvme": "NVMe (offload)"}
est = {}
for line in open(dry, errors="replace"):
    for tag, label in labels.items():
        if line.startswith("  " + label) and tag not in est:
            est[tag] = float(line.split()[-2]) / 1024
try:
    end = [json.loads(l) for l in open(metrics) if '"event":"end"' in l.replace(" ", "")][0]
    got = {k: v / 2**30 for k, v in end["peak_bytes"].items()}
    got.update({k: v / 2**30 for k, v in end.get("peak_host_bytes", {}).items()})
    got["nvme"] = end.get("nvme_bytes", 0) / 2**30
except (OSError, IndexError, KeyError):
    got = {}
if "total" not in est or "total" not in got:
    print(f"{name}\t\t\t\t\tno estimate or no end record")
    sys.exit(0)
def ratio(t):
    return f"{est.get(t, 0) / got[t]:.3f}" if got.get(t) else ("-" if not est.get(t) else "no peak")
host_tags = ("pinned", "pageable", "nvme")
device = [t for t in labels if t != "total" and t not in host_tags and (est.get(t) or got.get(t))]
cols = ", ".join(f"{t} {est.get(t, 0):.2f}/{got.get(t, 0):.2f}" for t in device)
host = ", ".join(f"{t} {est.get(t, 0):.2f}/{got.get(t, 0):.2f} ({ratio(t)})" for t in host_tags
                 if est.get(t, 0) >= 0.01 or got.get(t, 0) >= 0.01) or "none"
print(f"{name}\t{est['total']:.2f}\t{got['total']:.2f}\t{ratio('total')}\t{host}\t{cols}")
PY
  tail -1 "$tsv"
done
cat "$tsv"
