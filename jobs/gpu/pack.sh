#!/usr/bin/env bash
# Packs binaries built here to run on another machine (a GPU host) that has
# its own C runtime, MPI, CUDA driver and libraries but lacks some of the
# others ztrain links (Boost, parallel HDF5, ...).
#
#   jobs/gpu/pack.sh OUT_DIR HAVE_LIST BINARY...
#
# HAVE_LIST names the library files the target machine has, one per line
# (for example `ldconfig -p | awk '{print $1}'` run there). Every library a
# binary loads (ldd's list, which already follows dependencies) that is not
# in HAVE_LIST and is not the GPU driver's is copied to OUT_DIR/lib; the
# binaries go to OUT_DIR/bin, stripped of their host symbols (the GPU code
# stays). On the target:
#   export LD_LIBRARY_PATH=$PWD/OUT_DIR/lib:$LD_LIBRARY_PATH
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: pack.sh OUT_DIR HAVE_LIST BINARY..." >&2; exit 2; }
out=$1 have=$2
shift 2
[ -r "$have" ] || { echo "pack.sh: cannot read $have" >&2; exit 2; }
mkdir -p "$out/bin" "$out/lib"
for bin in "$@"; do
  cp -L "$bin" "$out/bin/"
  strip --strip-unneeded "$out/bin/$(basename "$bin")"
  ldd "$bin" | while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    case "$name" in libcuda.so*|libnvidia*) continue ;; esac
    grep -qxF "$name" "$have" && continue
    [ -e "$out/lib/$name" ] && continue
    [ -f "$path" ] || { echo "pack.sh: $name (needed by $bin) not found here" >&2; exit 1; }
    cp -L "$path" "$out/lib/$name"
    echo "packed $name"
  done
done
du -sh "$out"
