#!/usr/bin/env bash
# Files changed under a running job (docs/reliability.md):
#  - a token shard truncated while the run reads it: the run stops (exit 2)
#    naming the shard, instead of dying of SIGBUS without a word;
#  - a second run writing the same log directory is refused (exit 2) while
#    the first holds its lock;
#  - a log directory deleted during a run: a warning, once, and metrics.jsonl
#    is written anew from then on.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
cat > slow.json <<'JSON'
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 1, "steps_per_print": 1,
 "model": {"n_layer": 2, "n_head": 2, "d_model": 64, "seq_len": 32, "vocab_size": 64},
 "train": {"steps": 100000, "eval_interval": 0}}
JSON
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
start_bg() {  # start_bg OUT args...: ztrain on 2 ranks in the background; pid in $BG
  local out=$1
  shift
  # shellcheck disable=SC2086
  "$MPIEXEC" $MPI_FLAGS --bind-to none -np 2 "$ZTRAIN" "$@" > "$out" 2>&1 &
  BG=$!
  PIDS+=("$BG")
}
wait_for() {  # wait_for FILE PATTERN: up to 60 s
  for _ in $(seq 1 300); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.2; done
  return 1
}

# A shard truncated under the run.
"$ZDATA" markov --out m --train-tokens 2000000 --val-tokens 0 > /dev/null
start_bg bus.out slow.json --log-dir bus --set data.train='"m/train.bin"'
wait_for bus.out "step      3/" || fail "the run did not start: $(tail -3 bus.out)"
truncate -s 4096 m/train.bin
set +e; wait "$BG"; rc=$?; set -e
[ "$rc" = 2 ] && grep -q "ztrain: error: token shard 'm/train.bin' changed while the run was reading it (SIGBUS" bus.out \
  && echo "ok: a shard truncated under the run stops it naming the file" || fail "truncated shard: exit $rc, $(tail -5 bus.out)"

# Two runs in one log directory; then the directory deleted under the first.
start_bg a.out slow.json --log-dir shared
wait_for a.out "step      3/" || fail "run A did not start: $(tail -3 a.out)"
run_np 2 slow.json --log-dir shared --steps 2
[ "$RC" = 2 ] && grep -q "ztrain: error.*: log.dir 'shared' is in use by another run (process [0-9]* holds its lock 'shared/.lock')" "$WORK/out" \
  && echo "ok: a second run in the same log directory is refused" || fail "second run: exit $RC"
# The run may write its directory anew while rm empties it (what is tested
# below), so rm's own rmdir can find it not empty: every entry it saw is gone.
rm -rf shared 2>/dev/null || true
wait_for a.out "was removed or replaced during the run" || true
wait_for shared/metrics.jsonl '"step"' || true
kill -TERM "$BG"
set +e; wait "$BG"; set -e
n=$(grep -c "was removed or replaced during the run" a.out || true)
[ "$n" = 1 ] && grep -q "'shared/metrics.jsonl' was removed or replaced during the run (log.dir deleted?)" a.out \
  && [ -s shared/metrics.jsonl ] && grep -q '"step"' shared/metrics.jsonl \
  && echo "ok: a log directory deleted under the run: one warning, metrics written anew" \
  || fail "deleted log dir: $n warnings, $(ls shared 2>/dev/null | tr '\n' ' ')"
finish
