#!/usr/bin/env bash
# Hangs become loud failures (docs/reliability.md, "Hangs"). One case per
# CTest entry, chosen by WD_CASE (tests/apps/CMakeLists.txt), each with
# comm.timeout = 4 s so that every process must be gone within 19 s:
#   stop:NP        SIGSTOP one rank mid-step: every process exits non-zero
#                  within the bound, every other rank's dump exists, and
#                  `zdiag flight` names the stopped rank
#   kill           kill -9 one rank (np 2 and 4): the others exit within the bound
#   desync         an injected extra collective on one rank (np 2 and 4):
#                  `zdiag flight` reports the desync and both sequences
#   save           a rank stuck inside its checkpoint write: the same exit,
#                  the previous checkpoint intact and `latest`, zdiag names it
#   hang           a rank that stops issuing collectives (alive, heartbeat on):
#                  the others' collective times out, zdiag names it
#   device:NP      a rank stuck waiting for its device (ZT_INJECT_FAULT=
#                  stall-stream, the CPU device's simulation of a stalled
#                  stream, through the same watched wait as a CUDA
#                  synchronize): np 1 ends with exit 3 within the bound
#                  (nothing else would), np 2 too, and zdiag names the rank
#   zdiag          zdiag flight on written dumps of NCCL runs (which CPU runs
#                  cannot produce): a one-rank communicator whose collective
#                  never completes names that rank; on two ranks, the one
#                  whose GPU never reached the collective (queued) while the
#                  other is inside it (started) is named
#   sigusr2        SIGUSR2 writes every rank's dump and the run goes on;
#                  the comm keys and environment variables
set -e
. "$(dirname "$0")/lib.sh"
: "${ZDIAG:?ZDIAG is not set}"
cd "$WORK"
TIMEOUT=4
BOUND=$((TIMEOUT + 15))
cat > slow.json <<JSON
{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 1, "steps_per_print": 1,
 "model": {"n_layer": 2, "n_head": 2, "d_model": 64, "seq_len": 32, "vocab_size": 64},
 "train": {"steps": 100000, "eval_interval": 0}, "comm": {"timeout": $TIMEOUT}}
JSON
BG=""
# pids_of TEXT: the processes whose command line holds TEXT (arguments joined
# by spaces, each followed by one), read from /proc.
pids_of() {
  local d
  for d in /proc/[0-9]*; do
    case "$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null)" in *"$1"*) echo "${d#/proc/}" ;; esac
  done
}
cleanup() {
  [ -n "$BG" ] && kill -9 "$BG" 2>/dev/null || true
  for p in $(pids_of "ztrain slow.json --log-dir $WORK/"); do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

start_bg() {  # start_bg NP NAME [ztrain args...]: log dir $WORK/NAME, output NAME.out, pid $BG
  local np=$1 name=$2
  shift 2
  local x=()
  if [ -n "${ZT_INJECT_FAULT:-}" ]; then x=(-x ZT_INJECT_FAULT); fi
  # shellcheck disable=SC2086
  "$MPIEXEC" $MPI_FLAGS --bind-to none -np "$np" "${x[@]}" "$ZTRAIN" slow.json --log-dir "$WORK/$name" "$@" \
    > "$name.out" 2>&1 &
  BG=$!
}
wait_step() {  # wait_step NAME N: until the run prints step N (up to 30 s)
  for _ in $(seq 1 150); do grep -q "^step *$2/" "$1.out" 2>/dev/null && return 0; sleep 0.2; done
  return 1
}
rank_pid() {  # rank_pid NAME R: the pid of rank R of the run logging to $WORK/NAME
  local p
  for p in $(pids_of "ztrain slow.json --log-dir $WORK/$1 "); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then echo "$p"; return; fi
  done
}
# wait_gone NAME T0: waits for mpirun, sets RC and SECS (from T0, in s) and
# GONE=1 when no process of the run is left.
wait_gone() {
  set +e; wait "$BG"; RC=$?; set -e
  BG=""
  GONE=0
  while [ $(( ($(date +%s%N) - $2) / 1000000000 )) -le "$BOUND" ]; do
    if [ -z "$(pids_of "ztrain slow.json --log-dir $WORK/$1 ")" ]; then GONE=1; break; fi
    sleep 0.1
  done
  SECS=$(( ($(date +%s%N) - $2) / 1000000000 ))
}
diag() {  # diag NAME: zdiag flight on the run's dumps, output in NAME.diag, exit code in DRC
  set +e; "$ZDIAG" flight "$WORK/$1/flight" > "$1.diag" 2>&1; DRC=$?; set -e
}
dumps_of() {  # dumps_of NAME RANK...: true when each rank's dump exists and is JSON
  local name=$1 r
  shift
  for r in "$@"; do python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$WORK/$name/flight/rank_$r.json" \
    2>/dev/null || return 1; done
}
show() { echo "---- $1.out"; tail -8 "$1.out"; [ -f "$1.diag" ] && { echo "---- $1.diag"; cat "$1.diag"; }; return 0; }

unset ZT_INJECT_FAULT
case "${WD_CASE:?WD_CASE is not set}" in
stop:*)
  np=${WD_CASE#stop:}
  victim=1
  start_bg "$np" stop
  wait_step stop 3 || fail "stop np $np: the run did not start: $(tail -3 stop.out)"
  pid=$(rank_pid stop $victim)
  [ -n "$pid" ] || fail "stop np $np: no pid for rank $victim"
  t0=$(date +%s%N)
  kill -STOP "$pid"
  wait_gone stop "$t0"
  others=$(seq 0 $((np - 1)) | grep -vx $victim | tr '\n' ' ')
  # shellcheck disable=SC2086
  if [ "$RC" != 0 ] && [ "$SECS" -le "$BOUND" ] && [ "$GONE" = 1 ] && dumps_of stop $others; then
    echo "ok: np $np, rank $victim stopped: every process gone after $SECS s (bound $BOUND), exit $RC, dumps of ranks $others"
  else
    fail "np $np stop: exit $RC after $SECS s (bound $BOUND), gone $GONE, dumps: $(ls stop/flight 2>&1 | tr '\n' ' ')"; show stop
  fi
  diag stop
  if [ "$DRC" = 0 ] && grep -qx "culprit: rank $victim" stop.diag; then
    echo "ok: np $np: zdiag flight names the stopped rank $victim"
  else
    fail "np $np: zdiag exit $DRC does not name rank $victim"; show stop
  fi
  ;;
kill)
  for np in 2 4; do
    start_bg "$np" kill$np
    wait_step kill$np 3 || fail "kill np $np: the run did not start: $(tail -3 kill$np.out)"
    pid=$(rank_pid kill$np 1)
    t0=$(date +%s%N)
    kill -9 "$pid"
    wait_gone kill$np "$t0"
    [ "$RC" != 0 ] && [ "$SECS" -le "$BOUND" ] && [ "$GONE" = 1 ] \
      && echo "ok: np $np, rank 1 killed: every process gone after $SECS s (bound $BOUND), exit $RC" \
      || { fail "kill np $np: exit $RC after $SECS s, gone $GONE"; show kill$np; }
  done
  ;;
desync)
  for np in 2 4; do
    export ZT_INJECT_FAULT=desync:rank=1,step=5
    t0=$(date +%s%N)
    start_bg "$np" desync$np
    wait_gone desync$np "$t0"
    diag desync$np
    # Both sides with their sequences: "rank 1 from #K: ... #N all_reduce 1 x f64".
    if [ "$RC" != 0 ] && [ "$GONE" = 1 ] && [ "$DRC" = 0 ] \
      && grep -q "^desync on 'dp' (mpi, ranks 0-$((np - 1))) at collective #[0-9]*:" desync$np.diag \
      && grep -q "^  rank 1: all_reduce 1 x f64 (step 5, forward)" desync$np.diag \
      && grep -q "^  ranks\? 0[-,0-9]*: all_reduce [0-9]* x f32 (step 5, reduce, ReduceGrads)" desync$np.diag \
      && grep -q "^  rank 1 from #[0-9]*:.*all_reduce 1 x f64" desync$np.diag \
      && grep -q "^  rank 0 from #[0-9]*:.*all_reduce [0-9]* x f32" desync$np.diag; then
      echo "ok: np $np: zdiag flight reports the desync at $(grep -o 'collective #[0-9]*' desync$np.diag | head -1) and both sequences"
    else
      fail "desync np $np: exit $RC, zdiag exit $DRC"; show desync$np
    fi
    if [ "$np" = 4 ]; then
      grep -qx "culprit: rank 1" desync4.diag && echo "ok: np 4: the minority side (rank 1) is the culprit" \
        || { fail "desync np 4: rank 1 not named alone"; show desync4; }
    fi
  done
  ;;
save)
  export ZT_INJECT_FAULT=hang-in-save:rank=1,step=4
  start_bg 2 save --set 'checkpoint.dir="ck"' --set checkpoint.interval=2
  t0=$(date +%s%N)  # the run reaches step 4 within a second; the bound is from the start
  wait_gone save "$t0"
  diag save
  verified=1
  if [ -n "${ZCKPT:-}" ]; then "$ZCKPT" verify ck/step_2 > verify.out 2>&1 || verified=0; fi
  if [ "$RC" = 3 ] && [ "$SECS" -le "$BOUND" ] && [ "$GONE" = 1 ] && dumps_of save 0 1 \
    && [ "$(cat ck/latest)" = step_2 ] && [ ! -d ck/step_4 ] && [ "$verified" = 1 ] \
    && grep -q "collective #[0-9]* all_reduce (1 x f64) on communicator 'world' has not completed after [0-9]* s (comm.timeout = 4 s) at step 4, phase checkpoint" save.out; then
    echo "ok: a rank stuck in its checkpoint write: exit 3 after $SECS s, latest is still step_2 and verifies"
  else
    fail "save hang: exit $RC after $SECS s, gone $GONE, latest $(cat ck/latest 2>&1), $(ls ck | tr '\n' ' ')"; show save
  fi
  if [ "$DRC" = 0 ] && grep -q "^  rank 1 never entered it;.*(step 4, checkpoint)" save.diag && grep -qx "culprit: rank 1" save.diag; then
    echo "ok: zdiag flight: rank 1 never entered the checkpoint's agreement (step 4, checkpoint)"
  else
    fail "save hang: zdiag exit $DRC"; show save
  fi
  ;;
hang)
  export ZT_INJECT_FAULT=hang:rank=2,step=5
  t0=$(date +%s%N)
  start_bg 4 hang --set pipeline.parallel_size=2
  wait_gone hang "$t0"
  diag hang
  if [ "$RC" = 3 ] && [ "$GONE" = 1 ] && dumps_of hang 0 1 2 3 && grep -q "error on rank [0-9]: .* on communicator '[a-z]*' has not completed after [0-9]* s (comm.timeout = 4 s) at step 5" hang.out \
    && [ "$DRC" = 0 ] && grep -qx "culprit: rank 2" hang.diag && grep -q "^rank 2 was at step 5, forward$" hang.diag; then
    echo "ok: a rank that stops issuing (pipeline 2 x dp 2): exit 3 after $SECS s, zdiag names rank 2 at step 5"
  else
    fail "hang: exit $RC after $SECS s, zdiag exit $DRC"; show hang
  fi
  ;;
device:*)
  np=${WD_CASE#device:}
  victim=$((np - 1))
  export ZT_INJECT_FAULT=stall-stream:rank=$victim,step=3
  t0=$(date +%s%N)  # step 3 comes within a second or two; the bound is from the start
  start_bg "$np" dev
  wait_gone dev "$t0"
  diag dev
  if [ "$RC" = 3 ] && [ "$SECS" -le "$BOUND" ] && [ "$GONE" = 1 ] && dumps_of dev $(seq 0 $((np - 1))) \
    && grep -q "^rank $victim waits for its device (a simulated stuck device (ZT_INJECT_FAULT=stall-stream)) since [0-9]* s before its dump (step 3, forward)" dev.diag \
    && [ "$DRC" = 0 ] && grep -qx "culprit: rank $victim" dev.diag; then
    echo "ok: np $np, rank $victim stuck on its device: exit 3 after $SECS s (bound $BOUND), zdiag names it"
  else
    fail "device np $np: exit $RC after $SECS s, gone $GONE, zdiag exit $DRC"; show dev
  fi
  if [ "$np" = 1 ]; then
    grep -q "error on rank 0: this rank has waited [0-9]* s for its device (a simulated stuck device (ZT_INJECT_FAULT=stall-stream); comm.timeout = 4 s) at step 3, phase forward" dev.out \
      && echo "ok: np 1: the error names the wait, the step and the phase" || { fail "device np 1: message"; show dev; }
  fi
  ;;
zdiag)
  # dump DIR RANK WORLD MEMBERS STATE: rank RANK's dump with collective #5
  # on an NCCL communicator 'dp' of MEMBERS (comma-separated) in STATE.
  dump() {
    mkdir -p "$1"
    python3 - "$@" <<'PY'
import json, sys
d, rank, world, members, state = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
e = lambda seq, st: {"id": seq, "seq": seq, "op": "reduce_scatter", "count": 256, "dtype": "f32", "step": 3,
                     "phase": "backward", "instr": "", "state": st, "t_queued": 100.0, "t_started": -1, "t_completed": -1}
c = {"name": "dp", "backend": "nccl", "ranks": [int(m) for m in members.split(",")], "next_seq": 6,
     "entries": [e(4, "completed")], "in_flight": [e(5, state)]}
j = {"rank": rank, "world_size": world, "reason": "ended by rank 0: timeout", "time": 112.0, "suspects": [],
     "communicators": [c], "context": {"step": 3, "phase": "reduce"}}
json.dump(j, open(f"{d}/rank_{rank}.json", "w"))
PY
  }
  # expect_diag DIR EXIT LINE LAST WHAT: zdiag flight DIR exits EXIT, prints
  # a line matching LINE, and its last line matches LAST.
  expect_diag() {
    set +e; "$ZDIAG" flight "$1" > "$1.diag" 2>&1; local rc=$?; set -e
    if [ "$rc" = "$2" ] && grep -q "$3" "$1.diag" && tail -1 "$1.diag" | grep -q "$4"; then
      echo "ok: zdiag: $5"
    else
      fail "zdiag $1: exit $rc"; cat "$1.diag"
    fi
  }
  dump one 0 1 0 queued
  expect_diag one 0 "^on 'dp' (nccl, rank 0): collective #5 reduce_scatter 256 x f32 is queued and never completed (step 3, backward); rank 0 is its only member, so its own device never ran it" \
    "^culprit: rank 0$" "a one-rank NCCL collective never completed names that rank"
  dump two 0 2 0,1 started
  dump two 1 2 0,1 queued
  expect_diag two 0 "^  rank 0 is inside it; the device of rank 1 never reached it (queued behind earlier work on the GPU)" \
    "^culprit: rank 1$" "the rank whose GPU never reached the collective is named"
  dump both 0 2 0,1 started
  dump both 1 2 0,1 started
  expect_diag both 1 "^no culprit found" "^no culprit found" "both ranks inside the collective: no culprit"
  # A dump with a field of the wrong kind is named with the field, before any report.
  dump bad 0 1 0 queued
  python3 -c 'import json; p="bad/rank_0.json"; j=json.load(open(p)); j["communicators"][0]["in_flight"][0]["seq"]="x"; json.dump(j, open(p, "w"))'
  set +e; "$ZDIAG" flight bad > bad.diag 2>&1; rc=$?; set -e
  [ "$rc" = 2 ] && grep -q "bad/rank_0.json: not a flight recorder dump (communicators\[0\].in_flight\[0\].seq: expected an integer" bad.diag \
    && [ "$(wc -l < bad.diag)" = 1 ] && echo "ok: zdiag names the dump and the field of the wrong kind" || { fail "zdiag bad dump: exit $rc"; cat bad.diag; }
  set +e; "$ZDIAG" flight > none.diag 2>&1; rc=$?; set -e
  [ "$rc" = 2 ] && grep -q "^zdiag: flight: the dump directory (LOG_DIR/flight) is missing" none.diag \
    && echo "ok: zdiag says what is missing" || { fail "zdiag without a directory: exit $rc"; cat none.diag; }
  ;;
sigusr2)
  start_bg 2 usr
  wait_step usr 3 || fail "sigusr2: the run did not start"
  kill -USR2 "$BG"  # mpirun forwards SIGUSR2 to every rank
  for _ in $(seq 1 50); do dumps_of usr 0 1 && break; sleep 0.2; done
  n=$(grep -c "^step" usr.out)
  sleep 1.5
  if dumps_of usr 0 1 && kill -0 "$BG" 2>/dev/null && [ "$(grep -c "^step" usr.out)" -gt "$n" ] \
    && grep -q '"reason": "SIGUSR2 (on request; the run goes on)"' usr/flight/rank_1.json; then
    echo "ok: SIGUSR2 wrote both ranks' dumps and the run went on"
  else
    fail "sigusr2: dumps $(ls usr/flight 2>&1 | tr '\n' ' '), steps $n"; show usr
  fi
  diag usr
  [ "$DRC" = 1 ] && grep -q "^dumps on request (SIGUSR2)" usr.diag && grep -q "^no culprit found" usr.diag \
    && echo "ok: zdiag flight finds no culprit in a healthy run's dumps" \
    || { fail "sigusr2: zdiag exit $DRC on healthy dumps"; show usr; }
  kill -USR1 "$BG"
  set +e; wait "$BG"; rc=$?; set -e
  BG=""
  [ "$rc" = 0 ] && echo "ok: the run then stops normally (SIGUSR1), exit 0" || fail "sigusr2: final exit $rc"
  # The keys and the environment.
  run_np 2 slow.json --dry-run
  grep -q '"timeout": 4' "$WORK/out" && grep -q '"flight_recorder_size": 2048' "$WORK/out" \
    && echo "ok: comm.timeout and comm.flight_recorder_size in the resolved config" || fail "dry run: comm section"
  set +e
  # shellcheck disable=SC2086
  ZTRAIN_COMM_TIMEOUT=7.5 "$MPIEXEC" $MPI_FLAGS -np 2 -x ZTRAIN_COMM_TIMEOUT "$ZTRAIN" slow.json --dry-run > env.out 2>&1
  set -e
  grep -q '"timeout": 7.5' env.out && echo "ok: ZTRAIN_COMM_TIMEOUT overrides comm.timeout" || fail "env override: $(grep timeout env.out)"
  set +e
  # shellcheck disable=SC2086
  ZTRAIN_COMM_TIMEOUT=soon "$MPIEXEC" $MPI_FLAGS -np 1 -x ZTRAIN_COMM_TIMEOUT "$ZTRAIN" slow.json --dry-run > bad.out 2>&1
  brc=$?
  # shellcheck disable=SC2086
  NCCL_TIMEOUT=1800 "$MPIEXEC" $MPI_FLAGS -np 1 -x NCCL_TIMEOUT "$ZTRAIN" slow.json --steps 1 --log-dir nt > nccl.out 2>&1
  nrc=$?
  set -e
  [ "$brc" = 2 ] && grep -q "ZTRAIN_COMM_TIMEOUT='soon': expected a number of seconds > 0" bad.out \
    && echo "ok: a bad ZTRAIN_COMM_TIMEOUT is refused naming it" || fail "bad env: exit $brc, $(cat bad.out)"
  [ "$nrc" = 0 ] && grep -q "NCCL_TIMEOUT is set (1800) but has no effect.*\"comm\": {\"timeout\": seconds} or ZTRAIN_COMM_TIMEOUT" nccl.out \
    && echo "ok: NCCL_TIMEOUT draws a warning naming the key to use" || fail "NCCL_TIMEOUT: exit $nrc, $(cat nccl.out)"
  expect_error "comm.timeout 0 refused" 2 "comm.timeout" slow.json --set comm.timeout=0
  expect_error "an unknown comm key refused" 2 "comm.*watchdog" slow.json --set comm.watchdog=true
  ;;
*) fail "unknown WD_CASE '$WD_CASE'" ;;
esac
finish
