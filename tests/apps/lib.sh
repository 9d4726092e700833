# Helpers shared by the end-to-end test scripts. Environment from CTest:
# ZTRAIN, ZDATA, MPIEXEC, MPI_FLAGS, SRC.
set -u
FAILS=0
WORK=$(mktemp -d "${TMPDIR:-/tmp}/zt-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

run_np() {  # run_np NP args... ; output in $WORK/out, exit code in $RC
  local np=$1
  shift
  set +e
  # shellcheck disable=SC2086
  "$MPIEXEC" $MPI_FLAGS --bind-to none -np "$np" "$ZTRAIN" "$@" >"$WORK/out" 2>&1
  RC=$?
  set -e
}

# run_with NP CONFIG LOGDIR SETTINGS...: run_np with each SETTING as --set.
run_with() {
  local np=$1 cfg=$2 dir=$3 s
  shift 3
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  run_np "$np" "$cfg" --log-dir "$dir" "${sets[@]}"
}

fail() {
  echo "FAIL: $*"
  echo "---- output ----"
  cat "$WORK/out" 2>/dev/null | tail -30
  echo "----------------"
  FAILS=$((FAILS + 1))
}

expect_error() {  # expect_error NAME CODE PATTERN args... (one rank is enough for config errors)
  local name=$1 code=$2 pattern=$3
  shift 3
  run_np 2 "$@"
  if [ "$RC" != "$code" ]; then fail "$name: exit code $RC, expected $code"; return; fi
  if ! grep -q -E -- "$pattern" "$WORK/out"; then fail "$name: message does not match /$pattern/"; return; fi
  local n
  n=$(grep -c "ztrain: error" "$WORK/out")
  if [ "$n" != 1 ]; then fail "$name: error printed $n times, expected once"; return; fi
  echo "ok: $name"
}

# losses FILE: the "loss" of every step record in a metrics.jsonl, one per line.
losses() { grep '"step"' "$1" | grep -o '"loss":[^,}]*' | cut -d: -f2; }
field() { grep -o "\"$2\":[^,}]*" "$1" | tail -1 | cut -d: -f2; }

# bits DIR: loss, grad_norm and val_loss of every step, as printed (exact bits).
bits() {
  grep '"step"' "$1/metrics.jsonl" | while IFS= read -r rec; do
    out=""
    for k in step loss grad_norm val_loss; do
      out="$out $(echo "$rec" | grep -o "\"$k\":[^,}]*" || true)"
    done
    echo "$out"
  done
}

# peak DIR TAG: the bytes of TAG in the end record of DIR/metrics.jsonl.
peak() { tail -1 "$1/metrics.jsonl" | grep -o "\"$2\":[0-9]*" | cut -d: -f2; }

# memory_vs_estimate NAME CONFIG "TAG:LABEL;..." SETTINGS...: CONFIG on 2
# ranks (MEM_NP) with SETTINGS (--set values), --dry-run's estimate against the run
# (log dir mem-NAME): each TAG of the end record within 10% of the
# estimator's line starting with LABEL (both 0 passes).
memory_vs_estimate() {
  local name=$1 cfg=$2 pairs=$3 x pair tag m e
  shift 3
  local sets=()
  for x in "$@"; do sets+=(--set "$x"); done
  run_np "${MEM_NP:-2}" "$cfg" --dry-run "${sets[@]}"
  cp "$WORK/out" "dry-$name.txt"
  run_np "${MEM_NP:-2}" "$cfg" --log-dir "mem-$name" "${sets[@]}"
  [ "$RC" = 0 ] || { fail "memory $name: exit $RC"; return; }
  IFS=';' read -ra x <<< "$pairs"
  for pair in "${x[@]}"; do
    tag=${pair%%:*}
    m=$(peak "mem-$name" "$tag")
    e=$(grep "^  ${pair#*:}" "dry-$name.txt" | head -1 | awk '{ print $(NF-1) * 1048576 }')
    [ -n "$m" ] || m=0
    [ -n "$e" ] || e=0
    if awk -v m="$m" -v e="$e" 'BEGIN { exit !((m == 0 && e == 0) || (e > 0 && m / e >= 0.9 && m / e <= 1.1)) }'; then
      echo "ok: memory $name $tag: measured $m, estimate $e"
    else
      fail "memory $name $tag: measured $m, estimate $e"
    fi
  done
}

# pinned_saves WITH WITHOUT CONFIG WHAT...: the run in log dir WITHOUT
# holds 2 bytes per owned parameter (CONFIG's parameters over 2 ranks) less
# pinned host memory than the one in WITH, within 5%; WHAT names the two.
pinned_saves() {
  local with without params
  with=$(peak "$1" pinned) without=$(peak "$2" pinned)
  run_np 1 "$3" --dry-run
  params=$(grep -o "([0-9]* parameters" "$WORK/out" | head -1 | tr -dc 0-9)
  shift 3
  if [ -n "$with" ] && [ -n "$without" ] && [ -n "$params" ] &&
     awk -v a="$with" -v b="$without" -v p="$params" 'BEGIN { d = a - b; exit !(d >= 2 * p / 2 && d <= 1.05 * 2 * p / 2) }'; then
    echo "ok: pinned host memory per rank, $*: $with B against $without B ($params parameters on 2 ranks)"
  else
    fail "pinned host memory per rank, $*: '$with' B against '$without' B, expected 2 bytes x '$params' / 2 less"
  fi
}

# expect_bad_options NAME BAD...: each BAD (split at spaces) given after the
# command in the array BAD_CMD exits 2 with a message naming BAD's option.
expect_bad_options() {
  local name=$1 bad msg rc
  shift
  for bad in "$@"; do
    set +e
    # shellcheck disable=SC2086
    msg=$("${BAD_CMD[@]}" $bad 2>&1)
    rc=$?
    set -e
    if [ "$rc" = 2 ] && echo "$msg" | grep -q -- "${bad%% *}"; then
      echo "ok: $name $bad: exit 2, named"
    else
      echo "$msg" > "$WORK/out"
      fail "$name $bad: exit $rc, expected 2 naming ${bad%% *}"
    fi
  done
}

finish() {
  if [ "$FAILS" -ne 0 ]; then
    echo "$FAILS check(s) failed"
    exit 1
  fi
  echo "all checks passed"
}
