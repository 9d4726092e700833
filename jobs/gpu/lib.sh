# Set-up shared by the GPU-host check scripts (sourced): BUNDLE_DIR and
# OUT_DIR from the arguments, the bundle's libraries, NVLink multicast off,
# an mpirun command line, note() appending to OUT_DIR/summary.txt, and
# tiny_config FILE [PRESET] writing the check config of the tiny GPT (or
# PRESET: llama-tiny) (50 steps, 4 micro-batches of 8, warm-up, clipping).
# Usage: . jobs/gpu/lib.sh SCRIPT_NAME "$@"
name=$1
shift
bundle=${1:?usage: $name BUNDLE_DIR OUT_DIR}
out=${2:?usage: $name BUNDLE_DIR OUT_DIR}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/$bundle/lib:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE)
summary="$out/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
compare() {  # compare NAME REF OUT TOL: max relative difference of the loss curves
  python3 - "$@" <<'PY' | tee -a "$summary"
import json, sys
name, ref, out, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
def curve(p):
    try: return [json.loads(l)["loss"] for l in open(p) if '"step"' in l]
    except OSError: return []
a, b = curve(ref), curve(out)
if not a or len(a) != len(b):
    print(f"{name}: FAIL (curves of {len(a)} and {len(b)} steps)"); sys.exit()
d = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"{name}: {'ok' if d <= tol else 'FAIL'} max rel diff {d:.2e} (tol {tol:g}); loss {a[0]:.4f} -> {a[-1]:.4f} vs {b[-1]:.4f}")
PY
}
tiny_config() {  # tiny_config FILE [PRESET]: PRESET "tiny" unless given
  cat > "$1" <<JSON
{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 8, "steps_per_print": 1, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.003, "warmup_num_steps": 10, "warmup_type": "linear"}},
 "model": {"preset": "${2:-tiny}"}, "train": {"steps": 50, "eval_interval": 0}}
JSON
}
