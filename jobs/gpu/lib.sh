# Set-up shared by the GPU-host check scripts (sourced): BUNDLE_DIR and
# OUT_DIR from the arguments, the bundle's libraries, NVLink multicast off,
# an mpirun command line, and note() appending to OUT_DIR/summary.txt.
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
