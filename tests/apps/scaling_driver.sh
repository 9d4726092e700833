#!/usr/bin/env bash
# The scaling-study driver (jobs/scaling/run.py) end to end on the CPU with the
# tiny config: ranks 1 and 2, ZeRO stages 0 and 3, weak and strong scaling.
# The report has a row per configuration with numbers taken from the runs
# (tokens/s, peak memory, measured/estimated memory), the loss curves agree
# with the reference run of the same global batch to 1e-4 (ZeRO stages and
# data-parallel sizes are equivalent to ~1e-5), the TSV has every run; a
# failing configuration stops the driver with its name and log, and
# --keep-going reports it and runs the others.
set -e
. "$(dirname "$0")/lib.sh"
cd "$WORK"
"$ZDATA" markov --out data/markov >/dev/null
# A Python 3 with matplotlib (jobs/setup.sh installs Debian's python3-matplotlib).
PY=""
for p in python3 /usr/bin/python3; do
  if "$p" -c 'import matplotlib' 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || { echo "FAIL: no python3 with matplotlib (apt-get install python3-matplotlib)"; exit 1; }
driver=("$PY" "$SRC/jobs/scaling/run.py" --launcher "$MPIEXEC $MPI_FLAGS --bind-to none -np"
        --ztrain "$ZTRAIN" --config "$SRC/data/configs/tiny.json" --device cpu)
drive() {  # drive ARGS... ; output in $WORK/out, exit code in $RC
  set +e
  "${driver[@]}" "$@" >"$WORK/out" 2>&1
  RC=$?
  set -e
}
isnum() { awk -v x="$1" 'BEGIN { exit !(x ~ /^[-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$/) }'; }

# table FILE SECTION: the rows of the table under the "### SECTION" heading as
# run<TAB>ranks<TAB>ZeRO<TAB>tokens/s<TAB>peak MiB<TAB>measured/est.<TAB>Δloss<TAB>final loss,
# the columns found by their header names.
table() {
  awk -v want="### $2" '
    function trim(s) { gsub(/^[ `]+|[ `]+$/, "", s); return s }
    /^### / { on = index($0, want) == 1; hdr = 0; next }
    !on || !/^\|/ { next }
    !hdr { for (i = 2; i < NF; i++) col[trim($i)] = i; hdr = 1; next }
    /^\| ---/ { next }
    { print trim($col["run"]) "\t" trim($col["ranks"]) "\t" trim($col["ZeRO"]) "\t" trim($col["tokens/s"]) "\t" \
        trim($col["peak MiB/rank"]) "\t" trim($col["measured/est."]) "\t" trim($col["max rel. Δloss"]) "\t" trim($col["final loss"]) }
  ' FS='|' "$1"
}

drive --ranks "1 2" --stages "0 3" --mode both --steps 4 --out scaling.md --raw raw --busbw-gbs 1
[ "$RC" = 0 ] || fail "driver exited with $RC"
[ -s scaling.md ] || fail "no markdown written"
if grep -q "^- commit: " scaling.md && grep -q "^- date: " scaling.md && grep -q "^- machine: " scaling.md \
   && grep -q -- "^- command: .*--stages '0 3'" scaling.md; then
  echo "ok: header (date, machine, commit, command line)"
else
  fail "header incomplete"
fi

for mode in Weak Strong; do
  table scaling.md "$mode scaling" > "$mode.tsv"
  for stage in 0 3; do
    for n in 1 2; do
      what="$mode n=$n ZeRO-$stage"
      rows=$(awk -F'\t' -v n=$n -v s=$stage '$2 == n && $3 == s' "$mode.tsv")
      if [ "$(printf '%s\n' "$rows" | grep -c .)" != 1 ]; then fail "$what: expected one row, found: $rows"; continue; fi
      IFS=$'\t' read -r run _ _ tok mem ratio dloss loss <<<"$rows"
      if isnum "$tok" && awk -v x="$tok" 'BEGIN { exit !(x > 0) }' && isnum "$mem" && awk -v x="$mem" 'BEGIN { exit !(x > 0) }'; then
        echo "ok: $what: $tok tokens/s, $mem MiB per rank"
      else
        fail "$what: tokens/s '$tok' or memory '$mem' not a positive number"
      fi
      if isnum "$ratio"; then echo "ok: $what: measured/estimate memory $ratio"; else fail "$what: measured/estimate '$ratio' not a number"; fi
      # The numbers are the runs': the final loss is the last loss in the run's metrics.
      last=$(losses "raw/$run/metrics.jsonl" | tail -1)
      if awk -v a="$loss" -v b="$last" 'BEGIN { d = a - b; exit !(b != "" && d < 6e-5 && d > -6e-5) }'; then
        echo "ok: $what: final loss $loss is the run's ($last)"
      else
        fail "$what: final loss '$loss' is not raw/$run's last loss '$last'"
      fi
      # The loss curve against the reference run of the same global batch:
      # strong scaling always has one (the 1-rank run); in weak scaling the
      # 2-rank runs share their global batch with the strong 1-rank run.
      d=${dloss%% *}
      if [ "$d" = ref ]; then
        if [ "$n" = 1 ] && [ "$stage" = 0 ]; then echo "ok: $what is the reference"; else fail "$what: unexpected reference"; fi
      elif isnum "$d" && awk -v x="$d" 'BEGIN { exit !(x < 1e-4) }'; then
        echo "ok: $what: loss curve within $d of the reference"
      else
        fail "$what: loss curve difference '$dloss' not below 1e-4"
      fi
    done
  done
  [ "$(awk -F'\t' '$7 == "ref"' "$mode.tsv" | wc -l)" = 1 ] || fail "$mode: not exactly one reference row"
done
if grep -q "^- hidden: 1 − waited / time" scaling.md && grep -q "^- hidden (busbw): the estimate 1 − exposed / total" scaling.md; then
  echo "ok: hidden-communication formulas stated"
else
  fail "no hidden-communication explanation"
fi
# Every two-rank row carries the measured hidden fraction in [0, 1] and the
# collectives' time with the part waited for; one rank has no communication.
awk '
  function trim(s) { gsub(/^[ `]+|[ `]+$/, "", s); return s }
  /^### / { hdr = 0; next }
  !/^\|/ { next }
  !hdr { for (i = 2; i < NF; i++) col[trim($i)] = i; hdr = 1; next }
  /^\| ---/ { next }
  { print trim($col["ranks"]) "\t" trim($col["hidden"]) "\t" trim($col["comm ms/step (waited)"]) }
' FS='|' scaling.md > hidden.tsv
while IFS=$'\t' read -r n h ct; do
  if [ "$n" = 1 ]; then
    [ "$h" = "no comm" ] && echo "ok: one rank: no comm" || fail "one rank: hidden '$h'"
    continue
  fi
  h1=${h%% *}; c1=${ct%% *}; w1=${ct#*(}; w1=${w1%)}
  if isnum "$h1" && awk -v x="$h1" 'BEGIN { exit !(x >= 0 && x <= 1) }' && isnum "$c1" && isnum "$w1" \
     && awk -v c="$c1" -v w="$w1" 'BEGIN { exit !(c > 0 && w >= 0 && w <= c) }' && [[ "$h" == *"(busbw: "* ]]; then
    echo "ok: $n ranks: hidden $h, collectives $ct ms"
  else
    fail "$n ranks: hidden '$h', collectives '$ct'"
  fi
done < hidden.tsv
[ "$(grep -c . hidden.tsv)" = 8 ] || fail "hidden.tsv: $(grep -c . hidden.tsv) rows, expected 8"
n=$(awk -F'\t' 'NR > 1 && $4 == "ok"' raw/results.tsv | wc -l)
if [ "$n" = 8 ]; then echo "ok: results.tsv has the 8 rows"; else fail "results.tsv: $n ok rows, expected 8"; fi
n=$(grep -c '^- `tiny-n' scaling.md || true)
if [ "$n" = 8 ]; then echo "ok: a command for every row"; else fail "commands listed: $n, expected 8"; fi

# A failing configuration stops the driver, naming it and its log.
drive --ranks 1 --stages 7 --mode weak --steps 3 --out bad.md --raw bad
log=$(grep -o 'log: [^ ]*' "$WORK/out" | head -1 | cut -d' ' -f2)
if [ "$RC" != 0 ] && grep -q "FAILED: .*ZeRO stage 7" "$WORK/out" && [ -f "$log" ] \
   && grep -q "zero_optimization.stage" "$log" && [ ! -e bad.md ]; then
  echo "ok: a failing configuration exits $RC naming it and its log ($log)"
else
  fail "failing configuration: exit $RC, log '$log'"
fi

# --keep-going: the failure is reported, the other configuration still runs.
drive --ranks 1 --stages "7 0" --mode weak --steps 3 --out kg.md --raw kg --keep-going
table kg.md "Weak scaling" > kg.tsv
if [ "$RC" != 0 ] && grep -q "FAILED" kg.md && awk -F'\t' '$3 == 0 && $4 + 0 > 0 { f = 1 } END { exit !f }' kg.tsv; then
  echo "ok: --keep-going reports the failure and runs the rest (exit $RC)"
else
  fail "--keep-going: exit $RC"
fi

# --dry-run prints the commands and runs nothing.
drive --ranks "1 2" --stages 1 --mode weak --steps 3 --out dry.md --raw dry --dry-run
if [ "$RC" = 0 ] && [ "$(grep -c -- '--log-dir dry/' "$WORK/out")" = 2 ] && [ ! -e dry ] && [ ! -e dry.md ]; then
  echo "ok: --dry-run prints the commands only"
else
  fail "--dry-run"
fi
finish
