#!/usr/bin/env bash
# Started by srun once per rank: leaves the rank only the GPU of its
# node-local rank and runs the command.
#   srun jobs/slurm/bind_gpu.sh COMMAND [ARGS...]
# SLURM's CUDA_VISIBLE_DEVICES lists the node's GPUs of the job (or is unset:
# then GPUs 0..N-1 are meant); local rank L gets the L-th of them, modulo
# their number when there are more ranks than GPUs. With one visible GPU,
# ztrain's own choice (local rank modulo the visible count) is that GPU.
set -euo pipefail
local_rank=${SLURM_LOCALID:?bind_gpu.sh runs under srun (SLURM_LOCALID is not set)}
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  IFS=, read -r -a gpus <<< "$CUDA_VISIBLE_DEVICES"
else
  n=${SLURM_GPUS_ON_NODE:?bind_gpu.sh: neither CUDA_VISIBLE_DEVICES nor SLURM_GPUS_ON_NODE is set (ask for --gpus-per-node)}
  gpus=()
  for ((i = 0; i < n; i++)); do gpus+=("$i"); done
fi
if [ "${#gpus[@]}" = 0 ]; then
  echo "bind_gpu.sh: no GPU for local rank $local_rank (CUDA_VISIBLE_DEVICES '${CUDA_VISIBLE_DEVICES:-}'," \
    "SLURM_GPUS_ON_NODE '${SLURM_GPUS_ON_NODE:-}'): ask for --gpus-per-node" >&2
  exit 2
fi
export CUDA_VISIBLE_DEVICES=${gpus[local_rank % ${#gpus[@]}]}
exec "$@"
