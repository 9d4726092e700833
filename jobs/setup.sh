#!/usr/bin/env bash
# Installs what ztrain needs (Debian 12 packages, when missing), configures and
# builds into build/, and makes the default corpus in data/markov/.
# Idempotent: a second run only rebuilds what changed.
#
#   jobs/setup.sh            # Release build
#   BUILD_DIR=build-debug CMAKE_BUILD_TYPE=Debug jobs/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake ninja-build pkg-config git
          openmpi-bin libopenmpi-dev libhdf5-openmpi-dev
          libboost-program-options-dev nlohmann-json3-dev libopenblas-dev
          libgtest-dev googletest libssl-dev liburing-dev
          libpcre2-dev libsentencepiece-dev
          prometheus-cpp-dev prometheus python3 python3-matplotlib slurm-wlm munge
          clang libclang-rt-14-dev libomp-dev)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The CUDA toolkit is not a Debian package here; use it when it is installed.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

# With CUDA, cuDNN's fused attention is built in when the header-only
# cudnn-frontend is installed: its PyPI wheel puts the headers into
# <site-packages>/include, where modules/cuda/attention.cmake asks python3 to
# look (libcudnn itself comes with the CUDA installation). Only the headers
# are needed, hence --no-deps. Without them the flash kernels run everywhere.
if command -v nvcc >/dev/null 2>&1 &&
   ! python3 -c "import importlib.metadata as m; m.distribution('nvidia-cudnn-frontend')" 2>/dev/null; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-pip
  fi
  python3 -m pip install -q --break-system-packages --no-deps nvidia-cudnn-frontend==1.32.0 ||
    echo "setup: nvidia-cudnn-frontend not installed; CUDA attention will use the flash kernels only"
fi

BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-Release}" ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j "$JOBS"

if [ ! -f data/markov/train.bin ] || [ ! -f data/markov/val.bin ]; then
  "$BUILD_DIR/bin/zdata" markov --out data/markov
fi
echo "setup: done (binaries in $BUILD_DIR/bin)"
