#!/usr/bin/env bash
# ZeRO-Infinity's optimizer offload to NVMe ([Note: NVMe optimizer step] in
# src/optim/offload_adamw.hpp) end to end on the CPU backend, with the swap
# directory (nvme_path) in the test's temporary directory:
#  - ZeRO stages 1-3 x ranks 1-3 (fp32), bf16 and two pipeline stages give
#    the loss, gradient-norm and validation-loss bits of no offload, with
#    sub-groups of 1000 elements (several per shard), pipeline_read and
#    pipeline_write both on, both off and each alone, and non-default aio keys; the io_uring and thread-pool back ends give the
#    same bits; the delayed update gives the bits of the delayed host offload;
#  - a checkpoint saved with nvme resumes with cpu or none and back, bit-exact;
#  - nvme_path a device, a missing parent, a file system too small, and an
#    aio.block_size off the alignment are refused with exit 2 and their numbers;
#  - a clean run leaves no swap files; a killed run's files are removed by the
#    next start (which says so); a rank that fails removes its files before
#    the job is aborted; an injected write error stops the run naming the file
#    and "write", and the last checkpoint still resumes;
#  - the example configs data/configs/zero3-offload-{cpu,nvme}.json run;
#  - the parameters on NVMe too (offload_param "nvme", stage 3, [Note:
#    parameter offload to NVMe] in src/zero/param_swap.hpp): ranks 1-3 x the
#    optimizer on cpu or nvme (the stage-3 runs above) give the bits of no
#    offload in fp32, every unit
#    read again by its forward and its backward (reuse distance 0) through 2
#    read buffers, and written once per step; bf16 too, with part of them
#    resident in host memory (max_in_cpu); the io_uring and thread-pool back
#    ends (both equal to no offload); the delayed update with them; resume
#    bit-exact when saved on NVMe and resumed on the device or the host, and
#    saved on the host and resumed on NVMe; the estimator's device, pinned,
#    pageable and NVMe bytes within 10% of the run's; the killed, failing and
#    erroring runs above run with the parameters on NVMe too, so their
#    parameter files are removed as well; parameters on NVMe below stage 3 or
#    without the optimizer offloaded are refused by name.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
cp "$SRC/tests/apps/offload_small.json" c.json
SWAP="$WORK/swap"
OO=zero_optimization.offload_optimizer
NVME=(--set "$OO.device=\"nvme\"" --set "$OO.nvme_path=\"$SWAP\"" --set zero_optimization.sub_group_size=1000)
# Both pipeline keys on, two sets of buffers and a third, and aio keys off
# their defaults (4 KiB requests, 2 lanes, one submit per request, rounds).
PIPE=(--set "$OO.pipeline_read=true" --set "$OO.pipeline_write=true" --set "$OO.buffer_count=9"
      --set aio.block_size=4096 --set aio.queue_depth=4 --set aio.thread_count=2 --set aio.single_submit=true
      --set aio.overlap_events=false)
SYNC=(--set "$OO.pipeline_read=false" --set "$OO.pipeline_write=false")
OP=zero_optimization.offload_param
# The parameters on NVMe, every one of them (max_in_cpu 0), through 2 read
# buffers (fewer than the units), read again by every forward and backward.
PARAM=(--set zero_optimization.stage=3 --set "$OP.device=\"nvme\"" --set "$OP.nvme_path=\"$SWAP\"" --set "$OP.max_in_cpu=0"
       --set "$OP.buffer_count=2" --set "$OP.buffer_size=8000" --set zero_optimization.stage3_max_reuse_distance=0)


# no_swap_files WHAT: nothing of ztrain's is left in the swap directory.
no_swap_files() {
  local left
  left=$(ls "$SWAP" 2>/dev/null | grep '^ztrain-' || true)
  if [ -z "$left" ]; then echo "ok: $1: no swap files left"; else fail "$1: swap files left: $left"; fi
}

# same NAME NP "SETTINGS" NVME_ARGS... : the run with SETTINGS (--set each)
# without offload and with the NVMe optimizer give the same bits.
same() {
  local name=$1 np=$2 settings=$3
  shift 3
  local sets=()
  for s in $settings; do sets+=(--set "$s"); done
  run_np "$np" c.json --log-dir "$name-ref" "${sets[@]}"
  [ "$RC" = 0 ] || { fail "$name: reference run exit $RC"; return; }
  bits "$name-ref" > "$name-ref.txt"
  run_np "$np" c.json --log-dir "$name-nvme" "${sets[@]}" "${NVME[@]}" "$@"
  [ "$RC" = 0 ] || { fail "$name [nvme $*]: exit $RC"; return; }
  grep -q "NVMe optimizer: .* sub-groups of up to 1000" "$WORK/out" || fail "$name: no sub-group line in the log"
  bits "$name-nvme" > "$name-nvme.txt"
  if [ "$(wc -l < "$name-ref.txt")" = 5 ] && cmp -s "$name-ref.txt" "$name-nvme.txt"; then
    echo "ok: $name [nvme$(echo " $*" | grep -o -E 'pipeline_(read|write)=true|aio_backend="[a-z_]*"|offload_param.device="nvme"' | tr '\n' ' ' | sed 's/^/ /; s/ $//')] has the bits of no offload"
  else
    fail "$name [nvme $*]: bits differ from no offload"
    diff "$name-ref.txt" "$name-nvme.txt" | head -4
  fi
}

# ---- the bits of no offload --------------------------------------------------
for stage in 1 2 3; do
  for np in 1 2 3; do
    if [ $(((stage + np) % 2)) = 1 ]; then mode=("${PIPE[@]}"); else mode=("${SYNC[@]}"); fi
    # The thread pool on two ranks, auto (io_uring where it works) elsewhere.
    [ "$np" = 2 ] && mode+=(--set 'offload.aio_backend="threads"')
    # Stage 3: the parameters on NVMe too (below; the io_uring test keeps
    # them on the device).
    [ "$stage" = 3 ] && mode+=("${PARAM[@]}")
    same "z$stage-np$np" "$np" "zero_optimization.stage=$stage" "${mode[@]}"
  done
done
# One key without the other, with exactly two sets.
same "z2-np2-bf16" 2 "zero_optimization.stage=2 bf16.enabled=true" --set "$OO.buffer_count=6" \
  --set "$OO.pipeline_read=true"
same "z2-np2-p2" 2 "zero_optimization.stage=2 pipeline.parallel_size=2" --set "$OO.buffer_count=6" \
  --set "$OO.pipeline_write=true"
no_swap_files "after the clean runs"

# ---- io_uring and the thread pool -------------------------------------------
run_np 2 c.json --log-dir uring --set zero_optimization.stage=3 "${NVME[@]}" "${PIPE[@]}" \
  --set 'offload.aio_backend="io_uring"'
if [ "$RC" = 2 ] && grep -q "io_uring cannot be used here" "$WORK/out"; then
  echo "skip: io_uring vs threads: $(grep -o 'io_uring cannot be used here ([^)]*)' "$WORK/out" | head -1)"
elif [ "$RC" = 0 ]; then
  run_np 2 c.json --log-dir threads --set zero_optimization.stage=3 "${NVME[@]}" "${PIPE[@]}" \
    --set 'offload.aio_backend="threads"'
  bits uring > uring.txt
  bits threads > threads.txt
  if [ "$RC" = 0 ] && [ -s uring.txt ] && cmp -s uring.txt threads.txt && cmp -s uring.txt z3-np2-ref.txt; then
    echo "ok: io_uring and the thread pool give the same bits"
  else
    fail "io_uring vs threads: exit $RC, bits $(head -2 uring.txt) vs $(head -2 threads.txt)"
  fi
else
  fail "aio_backend io_uring: exit $RC"
fi

# ---- the parameters on NVMe -------------------------------------------------
# same_params NAME NP REF ARGS...: the run with the parameters on NVMe and
# ARGS has the bits of REF (a run without offload of the same settings).
same_params() {
  local name=$1 np=$2 ref=$3
  shift 3
  run_np "$np" c.json --log-dir "$name" "${PARAM[@]}" "$@"
  cp "$WORK/out" "$name.out"
  [ "$RC" = 0 ] || { fail "$name: exit $RC"; return; }
  grep -q "NVMe parameters: .* in $SWAP/ztrain-.*-param-rank0-params.swp" "$WORK/out" || fail "$name: no parameter file line"
  # (wall_clock_breakdown's phase times hold a "step" of their own)
  mkdir -p "$name-bits"
  sed 's/"time_breakdown_s":{[^}]*}//' "$name/metrics.jsonl" > "$name-bits/metrics.jsonl"
  bits "$name-bits" > "$name.txt"
  if [ "$(wc -l < "$ref")" = 5 ] && cmp -s "$ref" "$name.txt"; then
    echo "ok: $name has the bits of no offload ($(grep -o 'aio [a-z_]*)' "$WORK/out" | tail -1 | tr -d ')'))"
  else
    fail "$name: bits differ from no offload"
    diff "$ref" "$name.txt" | head -4
  fi
}
URING=threads  # io_uring where the io_uring test above could use it
[ -s uring.txt ] && URING=io_uring
# With the optimizer on NVMe: z3-np1..3 above. With it on the host here; on
# two ranks io_uring (the thread pool ran z3-np2 above): both equal the run
# without offload, hence each other.
for np in 1 2 3; do
  b=auto
  [ "$np" = 2 ] && b=$URING
  same_params "params-np$np-cpu" "$np" "z3-np$np-ref.txt" --set "$OO.device=\"cpu\"" --set "offload.aio_backend=\"$b\"" \
    --set wall_clock_breakdown=true
done
# Each forward and backward of the A micro-batches of a step uses every unit
# (2A times the file; the embedding, tied to the head, once more a
# micro-batch, the final LayerNorm, kept whole, once a step); a unit that its
# buffer still holds from its last use or write is not read again (at the
# turns of the walk, up to the 2 buffers' units), so a step reads between A
# and 2A + 1 times the file, and writes it once; the offload line says so.
file=$(grep -o 'param-rank0-params.swp ([0-9]* bytes' params-np3-cpu.out | grep -o '[0-9]* bytes' | cut -d' ' -f1)
A=$(grep -o 'x accum [0-9]*' params-np3-cpu.out | grep -o '[0-9]*$')
rd=$(grep '"step":3,' params-np3-cpu/metrics.jsonl | grep -o '"param_read_bytes":[0-9.e+]*' | cut -d: -f2)
wr=$(grep '"step":3,' params-np3-cpu/metrics.jsonl | grep -o '"param_write_bytes":[0-9.e+]*' | cut -d: -f2)
if [ -n "$file" ] && [ -n "$rd" ] && awk -v f="$file" -v r="$rd" -v w="$wr" -v a="$A" 'BEGIN { exit !(r / f > a && r / f < 2 * a + 1 && w == f) }'; then
  echo "ok: a step of $A micro-batches reads the parameters $(awk -v f="$file" -v r="$rd" 'BEGIN { printf "%.2f", r / f }') times ($rd bytes of a $file-byte file) and writes them once"
else
  fail "parameter reads and writes per step: file $file, read $rd, written $wr"
fi
grep -q -E "offload NVMe: optimizer read 0.00 MB .*; parameters read [0-9.]+ MB \(waited [0-9.]+ ms\), written [0-9.]+ MB" \
  params-np3-cpu.out && echo "ok: the offload line shows the parameters' NVMe bytes" || fail "no NVMe line in the breakdown"
# As many buffers as units: each unit stays in the buffer it was written
# from or last read into, and its next use takes it from there (the writes
# are not waited for at the end of a step): after the first step nothing is
# read, every step still writes the file once, and the bits are the same.
same_params "params-np1-keep" 1 "z3-np1-ref.txt" --set "$OO.device=\"cpu\"" --set "$OP.buffer_count=16" \
  --set wall_clock_breakdown=true
rd=$(grep '"step":3,' params-np1-keep/metrics.jsonl | grep -o '"param_read_bytes":[0-9.e+]*' | cut -d: -f2)
wr=$(grep '"step":3,' params-np1-keep/metrics.jsonl | grep -o '"param_write_bytes":[0-9.e+]*' | cut -d: -f2)
file=$(grep -o 'param-rank0-params.swp ([0-9]* bytes' params-np1-keep.out | grep -o '[0-9]* bytes' | cut -d' ' -f1)
if [ -n "$rd" ] && awk -v r="$rd" -v w="$wr" -v f="$file" 'BEGIN { exit !(r == 0 && w == f) }'; then
  echo "ok: 16 buffers hold every unit: step 3 reads 0 bytes and writes the $file-byte file once"
else
  fail "16 buffers: step 3 read $rd and wrote $wr bytes of a $file-byte file"
fi
# bf16, and the first units resident in host memory (max_in_cpu), pinned.
same "z3-np2-bf16" 2 "zero_optimization.stage=3 bf16.enabled=true" "${PARAM[@]}" --set "$OP.max_in_cpu=3000" \
  --set "$OP.pin_memory=true"
grep -q -E "NVMe parameters: .*, [1-9][0-9]* resident in host memory \(max_in_cpu 3000\)" "$WORK/out" \
  && echo "ok: max_in_cpu 3000 keeps the first units in host memory" || fail "max_in_cpu: no resident units"
no_swap_files "after the clean runs with the parameters on NVMe"

# ---- the delayed update: the bits of the host placement's -------------------
DELAY=(--set zero_optimization.stage=2 --set offload.delayed_update=true --set offload.delayed_update_warmup=2
       --set train.steps=8)
run_np 2 c.json --log-dir delay-cpu "${DELAY[@]}" --set "$OO.device=\"cpu\""
bits delay-cpu > delay-cpu.txt
# (at stage 3 with the parameters on NVMe too: the delayed update is the
# same at stages 2 and 3, tests/apps/offload.sh)
run_np 2 c.json --log-dir delay-nvme "${DELAY[@]}" "${NVME[@]}" "${PIPE[@]}" "${PARAM[@]}"
bits delay-nvme > delay-nvme.txt
if [ "$RC" = 0 ] && [ "$(wc -l < delay-cpu.txt)" = 8 ] && cmp -s delay-cpu.txt delay-nvme.txt; then
  echo "ok: the delayed update with nvme has the bits of the delayed host offload"
else
  fail "delayed update with nvme: exit $RC"
  diff delay-cpu.txt delay-nvme.txt | head -4
fi

# ---- resume across cpu, nvme and none ----------------------------------------
cat > r.json <<'JSON'
{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1, "gradient_clipping": 0.5,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
 "zero_optimization": {"stage": 2},
 "model": {"n_layer": 3, "n_head": 2, "d_model": 32, "seq_len": 16, "vocab_size": 64},
 "checkpoint": {"dir": "ck", "interval": 5},
 "train": {"steps": 10, "eval_interval": 0}}
JSON
NV="$OO.device=\"nvme\" $OO.nvme_path=\"$SWAP\" zero_optimization.sub_group_size=1000"
CPU="$OO.device=\"cpu\""
NONE="$OO.device=\"none\""
run_np 2 r.json --log-dir straight --set checkpoint.dir='"ck_straight"'
losses straight/metrics.jsonl | tail -5 > x
for pair in "NV NONE" "NONE NV" "NV CPU" "CPU NV" "NV NV"; do
  set -- $pair
  first=() second=()
  for s in ${!1}; do first+=(--set "$s"); done
  for s in ${!2}; do second+=(--set "$s"); done
  rm -rf ck
  run_np 2 r.json --log-dir "first-$1-$2" "${first[@]}" --steps 5
  run_np 2 r.json --log-dir "second-$1-$2" "${second[@]}" --resume auto
  name="saved with $1, resumed with $2"
  [ "$RC" = 0 ] && grep -q "resumed from ck/step_5" "$WORK/out" || { fail "$name: resume"; continue; }
  losses "second-$1-$2/metrics.jsonl" > y
  if [ -s x ] && cmp -s x y; then echo "ok: $name: bit-exact"; else fail "$name: losses differ: $(tr "\n" " " < x) vs $(tr "\n" " " < y)"; fi
done
no_swap_files "after the resumed runs"

# Stage 3: the parameters saved on NVMe resume on the device and on the host,
# and saved on the host resume on NVMe (a checkpoint holds the fp32 master;
# the working parameters follow it). The uninterrupted run is the stage-2 one
# above: ZeRO stages give the same bits (ztrain_zero_equivalence).
PNV="zero_optimization.stage=3 $OO.device=\"cpu\" $OP.device=\"nvme\" $OP.nvme_path=\"$SWAP\" $OP.max_in_cpu=0"
PCPU="zero_optimization.stage=3 $OO.device=\"cpu\" $OP.device=\"cpu\""
PNONE="zero_optimization.stage=3"
for pair in "PNV PNONE" "PNV PCPU" "PCPU PNV"; do
  set -- $pair
  first=() second=()
  for s in ${!1}; do first+=(--set "$s"); done
  for s in ${!2}; do second+=(--set "$s"); done
  # One first run per saving mode, resumed from its step 5 into a directory
  # of each second run's own.
  if [ ! -d "ck-$1/step_5" ]; then
    run_np 2 r.json --log-dir "first-$1" "${first[@]}" --set checkpoint.dir="\"ck-$1\"" --steps 5
  fi
  run_np 2 r.json --log-dir "second-$1-$2" "${second[@]}" --set checkpoint.dir="\"ck-$1-$2\"" --resume "ck-$1/step_5"
  name="stage 3, parameters saved with ${1#P}, resumed with ${2#P}"
  [ "$RC" = 0 ] && grep -q "resumed from ck-$1/step_5" "$WORK/out" || { fail "$name: resume"; continue; }
  losses "second-$1-$2/metrics.jsonl" > y
  if [ -s x ] && cmp -s x y; then echo "ok: $name: bit-exact"; else fail "$name: losses differ: $(tr "\n" " " < x) vs $(tr "\n" " " < y)"; fi
done
no_swap_files "after the resumed runs with the parameters on NVMe"

# ---- memory: the estimator against the run, with the parameters on NVMe ------
# Device tags, pinned and pageable host memory and the NVMe files per rank
# (--dry-run's estimate; the run's peaks and files at its end) within 10%.
# The other offload modes: tests/apps/offload.sh.
cat > m.json <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "steps_per_print": 1,
 "bf16": {"enabled": true},
 "zero_optimization": {"stage": 3, "stage3_max_reuse_distance": 0, "stage3_prefetch_bucket_size": 0,
                       "stage3_param_persistence_threshold": 1000, "overlap_comm": false},
 "model": {"n_layer": 8, "n_head": 4, "d_model": 64, "seq_len": 32},
 "train": {"steps": 4, "eval_interval": 0}}
JSON
mkdir -p "$WORK/swap-mem"  # there already, so that the estimate uses its alignment
MODES=("cpu-nvme $OO.device=\"cpu\" $OP.max_in_cpu=0 $OP.buffer_count=3"
       "nvme-nvme $OO.device=\"nvme\" $OO.nvme_path=\"$WORK/swap-mem\" zero_optimization.sub_group_size=20000 $OO.buffer_count=6 $OO.pin_memory=true $OP.max_in_cpu=30000 $OP.pin_memory=true")
TAGS="params:parameters (working;grads:gradients (fp32);optim:optimizer (master;pinned:pinned host memory;pageable:pageable host memory;nvme_bytes:NVMe (offload);comm:communication buckets;total:device total"
for mode in "${MODES[@]}"; do
  set -f
  # shellcheck disable=SC2086
  set -- $mode
  set +f
  name=$1
  shift
  memory_vs_estimate "$name" m.json "$TAGS" "$OP.device=\"nvme\"" "$OP.nvme_path=\"$WORK/swap-mem\"" "$@"
done
[ "$(peak mem-cpu-nvme nvme_bytes)" -gt 0 ] || fail "memory: no NVMe bytes measured"

# ---- refused: the parameters on NVMe below stage 3, or on a device optimizer --
expect_error "parameters on NVMe at stage 2" 2 \
  "$OP.device: \"nvme\" needs ZeRO stage 3 \(only stage 3 partitions the parameters\), found stage 2" \
  c.json --set zero_optimization.stage=2 --set "$OP.device=\"nvme\"" --set "$OP.nvme_path=\"$SWAP\"" --set "$OO.device=\"cpu\""
expect_error "parameters on NVMe with the optimizer on the device" 2 \
  "offload_param needs ZeRO stage 3 with offload_optimizer on \"cpu\" or \"nvme\" .*found stage 3 with the optimizer on the device" \
  c.json "${PARAM[@]}"
# (offload_param.nvme_path a device: tests/apps/config_errors.sh)

# ---- nvme_path and aio checks before the first step --------------------------
expect_error "nvme_path a character device" 2 \
  "$OO.nvme_path = /dev/null is a character device; NVMe offload needs a directory on a mounted file system" \
  c.json --set zero_optimization.stage=2 --set "$OO.device=\"nvme\"" --set "$OO.nvme_path=\"/dev/null\""
expect_error "nvme_path with a missing parent" 2 \
  "$OO.nvme_path = $WORK/no/such/dir does not exist, nor does its parent directory $WORK/no/such" \
  c.json --set zero_optimization.stage=2 --set "$OO.device=\"nvme\"" --set "$OO.nvme_path=\"$WORK/no/such/dir\""
expect_error "aio.block_size off the alignment" 2 "aio.block_size = 1000 must be a positive multiple of" \
  c.json --set zero_optimization.stage=2 "${NVME[@]}" --set aio.block_size=1000
# A file system of 64 KiB: the states of ~31k parameters need ~370 KB.
mkdir -p small
tiny_fs() {  # tiny_fs COMMAND...: runs it with a 64 KiB tmpfs on small/, in its own mount namespace
  if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
    unshare -m sh -c 'mount -t tmpfs -o size=64k tmpfs small && exec "$@"' sh "$@"
  else
    unshare -rm sh -c 'mount -t tmpfs -o size=64k tmpfs small && exec "$@"' sh "$@"
  fi
}
if tiny_fs true 2>/dev/null; then
  set +e
  tiny_fs "$ZTRAIN" c.json --log-dir small-run --set zero_optimization.stage=2 --set "$OO.device=\"nvme\"" \
    --set "$OO.nvme_path=\"$WORK/small/swap\"" > "$WORK/out" 2>&1
  RC=$?
  set -e
  if [ "$RC" = 2 ] && grep -q -E "$OO.nvme_path = $WORK/small/swap: the optimizer states need [0-9.]+ GiB \([0-9]+ bytes.*\) but the file system has [0-9.]+ GiB \([0-9]+ bytes\) free" "$WORK/out"; then
    echo "ok: a file system too small: $(grep -o 'need [0-9.]* GiB ([0-9]* bytes' "$WORK/out") ... $(grep -o 'has [0-9.]* GiB ([0-9]* bytes) free' "$WORK/out")"
  else
    fail "a file system too small: exit $RC"
  fi
else
  echo "skip: a file system too small: cannot mount a tmpfs here ($(unshare -rm true 2>&1 | head -1))"
fi

# ---- a killed run's files, removed by the next start -------------------------
# (with the parameters on NVMe too: their files go the same way)
K=("${PARAM[@]}" "${NVME[@]}" --set checkpoint.dir='"ckk"' --set checkpoint.interval=2 --set train.steps=6)
rm -rf "$SWAP"
ZT_INJECT_FAULT="kill-in-save:rank=0,step=4" run_np 2 c.json --log-dir killed "${K[@]}"
n=$(ls "$SWAP" 2>/dev/null | grep -c '\.swp$' || true)
np=$(ls "$SWAP" 2>/dev/null | grep -c -- '-param-rank[0-9]*-params\.swp$' || true)
if [ "$RC" != 0 ] && [ "$n" -ge 3 ] && [ "$np" -ge 1 ]; then
  echo "ok: the killed run (exit $RC) left $n swap files ($np of them parameters)"
else
  fail "killed run: exit $RC, $n swap files left"
fi
run_np 2 c.json --log-dir after-kill "${K[@]}" --resume auto
if [ "$RC" = 0 ] && grep -q "removed [0-9]* stale swap files of a killed run" "$WORK/out" &&
   grep -q "removed [0-9]* stale swap files of a killed run (run id '[^']*-param'" "$WORK/out"; then
  echo "ok: the next start removed them: $(grep -o 'removed [0-9]* stale swap files of a killed run' "$WORK/out" | head -1)"
else
  fail "after the kill: exit $RC, no removal reported"
fi
no_swap_files "after the run that followed the kill"

# ---- an error on one rank: its files go before the job is aborted ------------
rm -rf ckk "$SWAP"
ZT_INJECT_FAULT="rank=1,step=3" run_np 2 c.json --log-dir thrown "${K[@]}"
left=$(ls "$SWAP" 2>/dev/null | grep -- '-rank1-.*\.swp$' || true)
if [ "$RC" != 0 ] && grep -q "error on rank 1: .*injected fault" "$WORK/out" && [ -z "$left" ]; then
  echo "ok: an error on rank 1 (exit $RC) removed that rank's swap files"
else
  fail "error on rank 1: exit $RC, left: $left"
fi

# ---- an I/O error mid-run ---------------------------------------------------
rm -rf ckk
ZT_INJECT_FAULT="nvme-write-error:rank=1,step=3" run_np 2 c.json --log-dir ioerr "${K[@]}"
if [ "$RC" != 0 ] && grep -q -E "error on rank 1: .*aio write of $SWAP/ztrain-[^ ]*-rank1-master\.swp at offset [0-9]+ \([0-9]+ bytes\) failed: No space left on device" "$WORK/out"; then
  echo "ok: an NVMe write error stops the run (exit $RC), naming the file and the operation"
else
  fail "NVMe write error: exit $RC"
fi
left=$(ls "$SWAP" 2>/dev/null | grep -- '-rank1-' || true)
[ -z "$left" ] && echo "ok: the failing rank removed its swap files" || fail "the failing rank left: $left"
[ -d ckk/step_2 ] && [ ! -d ckk/step_4 ] || fail "checkpoints after the error: $(ls ckk)"
if [ -n "${ZCKPT:-}" ]; then
  "$ZCKPT" verify ckk/step_2 > v.out 2>&1 && echo "ok: zckpt verify accepts the last checkpoint" || fail "verify: $(cat v.out)"
fi
run_np 2 c.json --log-dir after-error "${K[@]}" --resume auto
[ "$RC" = 0 ] && grep -q "resumed from ckk/step_2" "$WORK/out" && echo "ok: the run resumes from the last checkpoint" \
  || fail "resume after the write error: exit $RC"
no_swap_files "after the run that followed the error"

# ---- the example configs -----------------------------------------------------
# As given, on the tiny model for a few steps; the nvme one with its
# nvme_path in the test's directory. (zero3-offload-*: offload_param "cpu"
# needs the engine's parameter offload.)
for ex in cpu nvme; do
  run_np 2 "$SRC/data/configs/zero3-offload-$ex.json" --log-dir "example-$ex" --set model.preset=tiny --steps 3 \
    --set "$OO.nvme_path=$( [ $ex = nvme ] && echo "\"$SWAP\"" || echo null)"
  if [ "$RC" = 0 ] && [ "$(grep -c '"step"' "example-$ex/metrics.jsonl")" = 3 ]; then
    echo "ok: data/configs/zero3-offload-$ex.json runs"
  else
    fail "data/configs/zero3-offload-$ex.json: exit $RC"
  fi
done
no_swap_files "after the example"
finish
