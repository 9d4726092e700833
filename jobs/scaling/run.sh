#!/usr/bin/env bash
# Scaling study: runs ztrain over ranks x ZeRO stages x pipeline layouts, in
# weak scaling (micro-batch and accumulation per data-parallel rank fixed, the
# global batch grows with the data-parallel size) and strong scaling (the
# global batch of the largest run, fixed), and writes a markdown report and a
# TSV of the raw numbers. Every number comes from the runs' metrics.jsonl and
# from `ztrain --estimate-memory`. See jobs/scaling/README.md.
#
#   jobs/scaling/run.sh [--ranks "1 2 4 8"] [--models "tiny ..."] [--stages "0 1 2 3"]
#                       [--pipeline "1:1 2:1 2:2"] [--mode weak|strong|both] [--steps N]
#                       [--device cpu|cuda|auto] [--launcher "mpirun ... -np"] [--ztrain PATH]
#                       [--config FILE] [--set KEY=VALUE]... [--out FILE.md] [--raw DIR]
#                       [--busbw-gbs X] [--keep-going] [--dry-run]
#
# Runs execute in the current directory (the shipped configs name their data
# relative to the repository root: run it from there).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# Shell words, quoted only where needed (for the report and the command lists).
quote() {
  local a s="" sq="'"
  for a in "$@"; do
    if [[ $a =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]]; then s+=" $a"; else s+=" $sq${a//$sq/$sq\\$sq$sq}$sq"; fi
  done
  printf '%s' "${s# }"
}
cmdline=$(quote "$0" "$@")

usage() {
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  cat <<'EOF'

Options (defaults in brackets):
  --ranks "N ..."     process (GPU) counts ["1 2 4 8"]
  --models "P ..."    model presets, set as model.preset [the config's model]
  --stages "S ..."    ZeRO stages ["0 1 2 3"]
  --pipeline "P:V ..." pipeline size : chunks per stage (V>1: interleaved, or P:V:SCHEDULE) ["1:1"]
  --mode M            weak, strong or both [both]
  --steps N           optimizer steps per run, >= 2; step 1 is warm-up and left out of medians [10]
  --device D          cpu, cuda or auto [cpu]
  --launcher "CMD"    launcher, the rank count is appended (split on blanks)
                      [$MPIEXEC $MPI_FLAGS -np, else mpirun --allow-run-as-root --oversubscribe -np]
  --ztrain PATH       the ztrain binary [REPO/build/bin/ztrain]
  --config FILE       base config [REPO/data/configs/tiny.json]
  --set KEY=VALUE     extra ztrain override for every run (repeatable; the driver's own keys win)
  --out FILE          markdown report [REPO/docs/scaling.md]
  --raw DIR           keep logs, metrics and results.tsv in DIR [a temporary directory, removed
                      when every run succeeded; the TSV then goes next to --out as FILE.tsv]
  --busbw-gbs X       measured bus bandwidth in GB/s (zbench), for the hidden-communication estimate
  --keep-going        on a failed run, report it and go on (the exit status is still 1)
  --dry-run           print the commands and exit
EOF
}

die() { echo "scaling: $*" >&2; exit 2; }

ranks="1 2 4 8"; models=""; stages="0 1 2 3"; pipeline="1:1"; mode=both; steps=10; device=cpu
launcher=""; ztrain="$repo/build/bin/ztrain"; config="$repo/data/configs/tiny.json"
out="$repo/docs/scaling.md"; raw=""; busbw=""; keep_going=0; dry_run=0
extra_sets=()
while (($#)); do
  case $1 in
    --ranks|--models|--stages|--pipeline|--mode|--steps|--device|--launcher|--ztrain|--config|--set|--out|--raw|--busbw-gbs)
      (($# >= 2)) || die "$1 needs a value"
      case $1 in
        --ranks) ranks=$2 ;; --models) models=$2 ;; --stages) stages=$2 ;; --pipeline) pipeline=$2 ;;
        --mode) mode=$2 ;; --steps) steps=$2 ;; --device) device=$2 ;; --launcher) launcher=$2 ;;
        --ztrain) ztrain=$2 ;; --config) config=$2 ;; --set) extra_sets+=("$2") ;; --out) out=$2 ;;
        --raw) raw=$2 ;; --busbw-gbs) busbw=$2 ;;
      esac
      shift 2 ;;
    --keep-going) keep_going=1; shift ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

isint() { [[ $1 =~ ^[0-9]+$ ]]; }
case $mode in weak) modes=(weak) ;; strong) modes=(strong) ;; both) modes=(weak strong) ;;
  *) die "--mode must be weak, strong or both, not '$mode'" ;; esac
case $device in cpu|cuda|auto) ;; *) die "--device must be cpu, cuda or auto, not '$device'" ;; esac
{ isint "$steps" && ((steps >= 2)); } || die "--steps must be an integer >= 2 (step 1 is left out as warm-up), not '$steps'"
for n in $ranks; do { isint "$n" && ((n >= 1)); } || die "--ranks: '$n' is not a positive integer"; done
[ -n "${ranks// /}" ] || die "--ranks is empty"
[ -n "${stages// /}" ] || die "--stages is empty"
for pv in $pipeline; do
  [[ $pv =~ ^[1-9][0-9]*:[1-9][0-9]*(:[a-z0-9]+)?$ ]] || die "--pipeline: '$pv' is not P:V or P:V:SCHEDULE"
done
if [ -n "$busbw" ]; then
  awk -v b="$busbw" 'BEGIN { exit !(b + 0 > 0) }' || die "--busbw-gbs must be a positive number, not '$busbw'"
fi
[ -f "$config" ] || die "config '$config' not found"
if ((!dry_run)); then
  [ -x "$ztrain" ] || die "ztrain binary '$ztrain' not found or not executable (build it, or pass --ztrain)"
fi
if [ -z "$launcher" ]; then
  if [ -n "${MPIEXEC:-}" ]; then launcher="$MPIEXEC ${MPI_FLAGS:-} -np"
  else launcher="mpirun --allow-run-as-root --oversubscribe -np"; fi
fi
read -r -a launch <<<"$launcher"

# ---- the base batch: DeepSpeed's triplet resolved for one data-parallel rank ----
# A top-level key of the config file, or the last --set of it: a number, "auto" or "".
cfg_key() {
  local v s
  v=$(tr -d '\n' <"$config" | grep -oE "\"$1\"[[:space:]]*:[[:space:]]*(\"[^\"]*\"|[0-9]+)" | head -1 \
      | sed -E 's/^[^:]*:[[:space:]]*//; s/"//g' || true)
  for s in ${extra_sets[@]+"${extra_sets[@]}"}; do
    if [[ $s == "$1="* ]]; then v=${s#*=}; v=${v//\"/}; fi
  done
  v=$(printf '%s' "$v" | tr '[:upper:]' '[:lower:]')
  [ "$v" = auto ] && v=""
  printf '%s' "$v"
}
bt=$(cfg_key train_batch_size); bm=$(cfg_key train_micro_batch_size_per_gpu); ba=$(cfg_key gradient_accumulation_steps)
for v in "$bt" "$bm" "$ba"; do [ -z "$v" ] || isint "$v" || die "$config: cannot read the batch sizes ('$v')"; done
if [ -n "$bt" ] && [ -n "$bm" ] && [ -n "$ba" ]; then
  ((bt == bm * ba)) || die "$config: train_batch_size $bt != micro $bm x accumulation $ba at one data-parallel rank"
  mb0=$bm; acc0=$ba
elif [ -n "$bt" ] && [ -n "$bm" ]; then
  ((bt % bm == 0)) || die "$config: train_batch_size $bt is not a multiple of the micro-batch $bm"
  mb0=$bm; acc0=$((bt / bm))
elif [ -n "$bt" ] && [ -n "$ba" ]; then
  ((bt % ba == 0)) || die "$config: train_batch_size $bt is not a multiple of the accumulation $ba"
  mb0=$((bt / ba)); acc0=$ba
elif [ -n "$bt" ]; then mb0=$bt; acc0=1
else mb0=${bm:-4}; acc0=${ba:-1}
fi
per_rank=$((mb0 * acc0))   # sequences per data-parallel rank and step (weak scaling)

# Largest data-parallel size of any layout that runs: strong scaling's global batch.
dp_max=0
for pv in $pipeline; do
  P=${pv%%:*}
  for n in $ranks; do
    if ((n % P == 0 && n / P > dp_max)); then dp_max=$((n / P)); fi
  done
done
((dp_max > 0)) || die "no --ranks value is a multiple of any --pipeline size"
g_strong=$((per_rank * dp_max))

if [ -z "$models" ]; then
  preset=$(tr -d '\n' <"$config" | grep -oE '"preset"[[:space:]]*:[[:space:]]*"[^"]*"' | head -1 | sed -E 's/.*:[[:space:]]*"//; s/"$//' || true)
  model_list=("${preset:-$(basename "$config" .json)}")
  set_model=0
else
  read -r -a model_list <<<"$models"
  set_model=1
fi

# ---- raw directory and outputs ----
own_raw=0
if ((dry_run)); then
  raw=${raw:-RAW}
elif [ -z "$raw" ]; then
  raw=$(mktemp -d "${TMPDIR:-/tmp}/ztrain-scaling.XXXXXX")
  own_raw=1
else
  mkdir -p "$raw"
fi
failures=0
cleanup() {
  if ((own_raw)); then
    if ((failures == 0)); then rm -rf "$raw"; else echo "scaling: logs kept in $raw" >&2; fi
  fi
}
trap cleanup EXIT

# ---- metrics.jsonl -> summary (name value lines) and the loss per step ----
summarize() {  # summarize METRICS LOSSFILE > SUMMARY
  awk -v lossfile="$2" '
    function val(s, k,   r) {
      if (!match(s, "\"" k "\":[^,}]*")) return ""
      r = substr(s, RSTART + length(k) + 3, RLENGTH - length(k) - 3)
      gsub(/"/, "", r)
      return r
    }
    function obj(s, k) { return match(s, "\"" k "\":\\{[^}]*\\}") ? substr(s, RSTART, RLENGTH) : "" }
    function median(a, n,   i, j, x) {
      if (n == 0) return ""
      for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    /"event":"end"/ {
      pk = obj($0, "peak_bytes"); ended = 1
      split("total params grads optim activations comm workspace offload", tags, " ")
      for (i = 1; i <= 8; i++) print "peak_" tags[i], val(pk, tags[i])
      next
    }
    /"tokens_per_s"/ {
      top = substr($0, 2); gsub(/\{[^{}]*\}/, "", top)   # the top level only
      step = val(top, "step") + 0; loss = val(top, "loss")
      print loss > lossfile
      steps++; last_loss = loss
      if (step <= 1) next                               # warm-up
      tok[++nt] = val(top, "tokens_per_s") + 0
      tb = obj($0, "time_breakdown_s")
      if (tb != "") { red[++nr] = val(tb, "reduce") + 0; stp[++ns] = val(tb, "step") + 0 }
      cb = obj($0, "comm_bytes")
      if (cb != "") { ar = val(cb, "all_reduce"); rs = val(cb, "reduce_scatter"); ag = val(cb, "all_gather") }
      b = val(top, "bubble_measured"); if (b != "") bub[++nb] = b + 0
      b = val(top, "bubble_schedule"); if (b != "") bsched = b
    }
    END {
      print "steps", steps + 0; print "ended", ended + 0; print "final_loss", last_loss
      print "tokens_per_s", median(tok, nt); print "reduce_s", median(red, nr); print "step_s", median(stp, ns)
      print "comm_all_reduce", ar; print "comm_reduce_scatter", rs; print "comm_all_gather", ag
      print "bubble_measured", median(bub, nb); print "bubble_schedule", bsched
    }' "$1"
}
get() { awk -v k="$2" '$1 == k { print $2; f = 1 } END { if (!f) print "" }' "$raw/$1/summary.txt"; }

# The DEVICE total (bytes) of the configured stage in `ztrain --estimate-memory`.
estimate_total() {  # estimate_total FILE STAGE
  awk -v s="$2" '
    /^memory per rank \(GiB\)/ { u = 1073741824 } /^memory per rank \(MiB\)/ { u = 1048576 }
    $1 == s && ($2 == "none" || $2 == "none/none") && $3 != "n/a:" && u { printf "%.0f\n", $10 * u; exit }' "$1"
}

# ---- the plan: one row per (model, mode, layout, stage, ranks) ----
rows=()       # "mode|model|n|P|V|sched|dp|stage|micro|accum|global|key"
skipped=()    # "mode|model|text"
for model in "${model_list[@]}"; do
  for m in "${modes[@]}"; do
    for pv in $pipeline; do
      IFS=: read -r P V sched <<<"$pv"
      [ -n "$sched" ] || { if ((V > 1)); then sched=interleaved; else sched=1f1b; fi; }
      for stage in $stages; do
        for n in $ranks; do
          if ((n % P != 0)); then
            skipped+=("$m|$model|$n rank(s) with P:V $P:$V, ZeRO stage $stage: $n is not a multiple of P=$P")
            continue
          fi
          dp=$((n / P))
          if [ "$m" = weak ]; then
            micro=$mb0; accum=$acc0
          else
            if ((g_strong % dp != 0)); then
              skipped+=("$m|$model|$n rank(s) with P:V $P:$V, ZeRO stage $stage: global batch $g_strong is not a multiple of dp $dp")
              continue
            fi
            s=$((g_strong / dp)); micro=$mb0
            while ((s % micro != 0)); do micro=$((micro - 1)); done
            accum=$((s / micro))
          fi
          rows+=("$m|$model|$n|$P|$V|$sched|$dp|$stage|$micro|$accum|$((micro * accum * dp))|$model-n$n-p${P}v$V$([ "$sched" = 1f1b ] || [ "$sched" = interleaved ] || echo "-$sched")-z$stage-m${micro}a$accum")
        done
      done
    done
  done
done

# ---- run ----
declare -A done_key status cmd_of
ran=()
for row in "${rows[@]}"; do
  IFS='|' read -r m model n P V sched dp stage micro accum global key <<<"$row"
  [ -z "${done_key[$key]:-}" ] || continue
  done_key[$key]=1
  ran+=("$key")
  sets=()
  for s in ${extra_sets[@]+"${extra_sets[@]}"}; do sets+=(--set "$s"); done
  ((set_model)) && sets+=(--set "model.preset=$model")
  sets+=(--set "zero_optimization.stage=$stage" --set "pipeline.parallel_size=$P" --set "pipeline.num_chunks=$V"
         --set "pipeline.pipe_schedule_name=$sched" --set "train_batch_size=$global"
         --set "train_micro_batch_size_per_gpu=$micro" --set "gradient_accumulation_steps=$accum"
         --set "steps_per_print=1" --set "wall_clock_breakdown=true")
  run_cmd=("${launch[@]}" "$n" "$ztrain" "$config" --device "$device" --steps "$steps" --log-dir "$raw/$key" "${sets[@]}")
  est_cmd=("${launch[@]}" 1 "$ztrain" "$config" --estimate-memory --world "$n" "${sets[@]}")
  cmd_of[$key]=$(quote "${run_cmd[@]}")
  what="model $model, $n rank(s), P:V $P:$V ($sched), dp $dp, ZeRO stage $stage, micro $micro x accum $accum (global batch $global)"
  if ((dry_run)); then
    echo "${cmd_of[$key]}"
    quote "${est_cmd[@]}"; echo
    continue
  fi
  log="$raw/$key.log"
  echo "scaling: running $what" >&2
  rm -rf "${raw:?}/$key"
  mkdir -p "$raw/$key"
  rc=0
  "${run_cmd[@]}" >"$log" 2>&1 || rc=$?
  if ((rc == 0)) && [ -f "$raw/$key/metrics.jsonl" ]; then
    summarize "$raw/$key/metrics.jsonl" "$raw/$key/losses.txt" >"$raw/$key/summary.txt"
  fi
  if ((rc != 0)) || [ ! -s "$raw/$key/summary.txt" ] || [ "$(get "$key" ended)" != 1 ] || [ "$(get "$key" steps)" != "$steps" ]; then
    status[$key]=FAILED
    failures=$((failures + 1))
    why="exit code $rc"
    ((rc != 0)) || why="no complete metrics in $raw/$key/metrics.jsonl"
    {
      echo "scaling: FAILED: $what ($why); log: $log"
      # ztrain's own error lines, else the end of the log.
      { awk '/error|Error|ERROR/ && n < 5 { print; n++ } END { exit !n }' "$log" || tail -n 8 "$log"; } | sed 's/^/  | /'
    } >&2
    if ((!keep_going)); then
      echo "scaling: stopping (pass --keep-going to run the other configurations)" >&2
      exit 1
    fi
    continue
  fi
  status[$key]=ok
  "${est_cmd[@]}" >"$raw/$key.estimate.txt" 2>&1 || echo "scaling: warning: memory estimate failed for $what (see $raw/$key.estimate.txt)" >&2
  est=$(estimate_total "$raw/$key.estimate.txt" "$stage")
  echo "est_device $est" >>"$raw/$key/summary.txt"
done
((dry_run)) && exit 0

# ---- derived numbers per row ----
fmt() { awk -v f="$1" -v x="$2" 'BEGIN { if (x == "") print "n/a"; else printf f "\n", x }'; }
# max |loss - ref| / |ref| over the steps; empty when the curves differ in length.
loss_diff() {
  paste "$raw/$1/losses.txt" "$raw/$2/losses.txt" | awk '
    NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; r = $2 < 0 ? -$2 : $2; d = r > 0 ? d / r : d; if (d > m) m = d }
    END { if (!bad && NR > 0) printf "%.3e\n", m }'
}
# The reference of a row: among the successful runs of the same model and global
# batch (either mode), the one with the fewest ranks, then the smallest P, then
# the lowest ZeRO stage. Prints that run and how many distinct runs there are.
ref_of() {  # ref_of MODEL GLOBAL
  local r best="" bestk="" k
  local -A seen=()
  for r in "${rows[@]}"; do
    IFS='|' read -r _ rmodel rn rP _ _ _ rstage _ _ rglobal rkey <<<"$r"
    if [ "$rmodel" != "$1" ] || [ "$rglobal" != "$2" ] || [ "${status[$rkey]:-}" != ok ]; then continue; fi
    seen[$rkey]=1
    k=$(printf '%09d %09d %s' "$rn" "$rP" "$rstage")
    if [ -z "$best" ] || [[ $k < $bestk ]]; then best=$rkey; bestk=$k; fi
  done
  printf '%s %s' "${best:--}" "${#seen[@]}"
}
# Efficiency baseline: the 1-rank run of the same model, mode and ZeRO stage.
base_of() {  # base_of MODE MODEL STAGE
  local r
  for r in "${rows[@]}"; do
    IFS='|' read -r rm rmodel rn _ _ _ _ rstage _ _ _ rkey <<<"$r"
    if [ "$rm" = "$1" ] && [ "$rmodel" = "$2" ] && [ "$rstage" = "$3" ] && [ "$rn" = 1 ] && [ "${status[$rkey]:-}" = ok ]; then
      printf '%s' "$rkey"; return
    fi
  done
}

tsv="$raw/results.tsv"
((own_raw)) && tsv="${out%.md}.tsv"
mkdir -p "$(dirname "$out")" "$(dirname "$tsv")"
tags="params grads optim activations comm workspace offload"
{
  printf 'mode\tmodel\trun\tstatus\tranks\tP\tV\tschedule\tdp\tzero_stage\tmicro\taccum\tglobal_batch\tsteps\tfinal_loss'
  printf '\tref_run\tmax_rel_loss_diff\ttokens_per_s\ttokens_per_s_per_rank\tefficiency\tstep_s\treduce_s'
  printf '\tcomm_all_reduce_bytes\tcomm_reduce_scatter_bytes\tcomm_all_gather_bytes\tcomm_est_s\thidden_fraction'
  printf '\tbubble_measured\tbubble_schedule\tpeak_total_bytes'
  for t in $tags; do printf '\tpeak_%s_bytes' "$t"; done
  printf '\test_device_bytes\tmeasured_over_estimate\tlog\tcommand\n'
} >"$tsv"
ncol=$(head -1 "$tsv" | awk -F'\t' '{ print NF }')

declare -A md   # md[mode|model] = table rows; cm[mode|model] = command list
declare -A cm
for row in "${rows[@]}"; do
  IFS='|' read -r m model n P V sched dp stage micro accum global key <<<"$row"
  log="$raw/$key.log"
  cm[$m|$model]+="- \`$key\`: \`${cmd_of[$key]}\`"$'\n'
  if [ "${status[$key]:-}" != ok ]; then
    md[$m|$model]+="| \`$key\` | $n | $P:$V | $dp | $stage | ${micro}×$accum | $global | FAILED: see \`$log\` |"$'\n'
    {
      printf '%s\t%s\t%s\tFAILED\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s' "$m" "$model" "$key" "$n" "$P" "$V" "$sched" "$dp" "$stage" "$micro" "$accum" "$global" "$steps"
      for ((i = 16; i < ncol; i++)); do printf '\t'; done   # no numbers
      printf '\t%s\t%s\n' "$log" "${cmd_of[$key]}"
    } >>"$tsv"
    continue
  fi
  tok=$(get "$key" tokens_per_s); red=$(get "$key" reduce_s); stp=$(get "$key" step_s)
  ar=$(get "$key" comm_all_reduce); rs=$(get "$key" comm_reduce_scatter); ag=$(get "$key" comm_all_gather)
  peak=$(get "$key" peak_total); est=$(get "$key" est_device)
  read -r ref peers <<<"$(ref_of "$model" "$global")"; diff=""; refcell="n/a"
  if ((peers < 2)); then ref=""; refcell="n/a (no other run with global batch $global)"
  elif [ "$ref" = "$key" ]; then refcell="ref"
  elif [ -n "$ref" ]; then diff=$(loss_diff "$key" "$ref"); refcell="$(fmt %.1e "$diff") (vs \`$ref\`)"; fi
  base=$(base_of "$m" "$model" "$stage"); eff=""
  [ -z "$base" ] || eff=$(awk -v a="$tok" -v n="$n" -v b="$(get "$base" tokens_per_s)" 'BEGIN { if (b > 0) printf "%.4f", a / n / b }')
  per=$(awk -v a="$tok" -v n="$n" 'BEGIN { printf "%.2f", a / n }')
  # Communication time at the bus bandwidth: all_reduce moves 2(dp-1)/dp of its
  # bytes per rank, reduce_scatter and all_gather (dp-1)/dp (zbench's busbw).
  comm_s=""; hidden=""
  if [ -n "$busbw" ] && [ -n "$ar" ]; then
    comm_s=$(awk -v ar="$ar" -v rs="$rs" -v ag="$ag" -v n="$dp" -v b="$busbw" \
      'BEGIN { t = (2 * ar + rs + ag) * (n - 1) / n / (b * 1e9); if (t > 0) printf "%.6g", t }')
    [ -z "$comm_s" ] || [ -z "$red" ] || hidden=$(awk -v t="$comm_s" -v e="$red" \
      'BEGIN { h = 1 - e / t; if (h < 0) h = 0; if (h > 1) h = 1; printf "%.4f", h }')
  fi
  ratio=""
  [ -z "$est" ] || ratio=$(awk -v a="$peak" -v b="$est" 'BEGIN { if (b > 0) printf "%.4f", a / b }')
  bytag=""
  for t in $tags; do
    v=$(get "$key" "peak_$t")
    [ -z "$v" ] || [ "$v" = 0 ] || bytag+="${bytag:+, }$t $(awk -v x="$v" 'BEGIN { printf "%.2f", x / 1048576 }')"
  done
  bub="–"
  bm=$(get "$key" bubble_measured); bs=$(get "$key" bubble_schedule)
  ((P == 1)) || bub="$(fmt %.1f%% "$(awk -v x="$bm" 'BEGIN { if (x != "") print x * 100 }')") / $(fmt %.1f%% "$(awk -v x="$bs" 'BEGIN { if (x != "") print x * 100 }')")"
  hcell="–"; [ -z "$busbw" ] || { if ((dp == 1)); then hcell="no comm"; else hcell=$(fmt %.2f "$hidden"); fi; }
  commcell=$(awk -v ar="$ar" -v rs="$rs" -v ag="$ag" 'BEGIN { if (ar rs ag != "") printf "%.3f", (ar + rs + ag) / 1e6; else print "n/a" }')
  md[$m|$model]+="| \`$key\` | $n | $P:$V | $dp | $stage | ${micro}×$accum | $global | $(fmt %.0f "$tok") | $(fmt %.0f "$per") | $(fmt %.2f "$eff") | $(fmt %.4f "$(get "$key" final_loss)") | $refcell | $(fmt %.2f "$(awk -v x="$peak" 'BEGIN { print x / 1048576 }')") | $(fmt %.2f "$(awk -v x="$est" 'BEGIN { if (x != "") print x / 1048576 }')") | $(fmt %.2f "$ratio") | $bytag | $(fmt %.2f "$(awk -v x="$red" 'BEGIN { if (x != "") print x * 1e3 }')") | $commcell | $hcell | $bub |"$'\n'
  {
    printf '%s\t%s\t%s\tok\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s' "$m" "$model" "$key" "$n" "$P" "$V" "$sched" "$dp" "$stage" "$micro" "$accum" "$global" "$steps" "$(get "$key" final_loss)"
    printf '\t%s\t%s\t%s\t%s\t%s\t%s\t%s' "$ref" "$diff" "$tok" "$per" "$eff" "$stp" "$red"
    printf '\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s' "$ar" "$rs" "$ag" "$comm_s" "$hidden" "$bm" "$bs" "$peak"
    for t in $tags; do printf '\t%s' "$(get "$key" "peak_$t")"; done
    printf '\t%s\t%s\t%s\t%s\n' "$est" "$ratio" "$log" "${cmd_of[$key]}"
  } >>"$tsv"
done

# ---- the report ----
commit=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$commit" != unknown ] && [ -n "$(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  commit="$commit (with uncommitted changes)"
fi
gpus=""
if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(nvidia-smi -L 2>/dev/null || true); fi
cpu=$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | sed 's/^[^:]*: *//' || true)
version=$("$ztrain" --version 2>/dev/null | head -1 || true)
tmp="$out.tmp.$$"
{
  echo "# ztrain scaling study"
  echo
  echo "- date: $(date -u)"
  echo "- machine: $(hostname), $(nproc) CPUs${cpu:+ ($cpu)}"
  if [ -n "$gpus" ]; then echo "- GPUs:"; while IFS= read -r g; do echo "  - $g"; done <<<"$gpus"; else echo "- GPUs: none visible (no nvidia-smi)"; fi
  echo "- commit: $commit"
  echo "- ztrain: \`$ztrain\`${version:+ ($version)}, device $device, base config \`$config\`, $steps steps per run"
  echo "- command: \`$cmdline\`"
  echo "- launcher: \`$launcher N\`"
  echo "- raw numbers: \`$tsv\`$( ((own_raw)) || echo ", logs and metrics in \`$raw\`")"
  echo
  echo "How the columns are computed (every number from the runs' \`metrics.jsonl\`, one record per step):"
  echo
  echo "- tokens/s: median over steps 2..$steps of \`tokens_per_s\` (global batch tokens over step time; step 1 is warm-up). Per rank: divided by the ranks."
  echo "- efficiency: tokens/s per rank over that of the 1-rank run of the same model, mode and ZeRO stage (n/a without one)."
  echo "- Δloss: max over steps of |loss − loss_ref| / |loss_ref|, against the run of the same model and global batch with the fewest ranks (then smallest P, lowest stage) in either mode (for strong scaling the 1-rank run when --ranks has 1); \"ref\" marks that run, n/a when no other run has that global batch."
  echo "- peak MiB: \`peak_bytes.total\` of the end record (max over ranks), by tag beside it; est. MiB: the DEVICE total of \`ztrain --estimate-memory CONFIG --world N\` with the same overrides."
  echo "- reduce ms: median of \`time_breakdown_s.reduce\`, the time blocked between the last backward and the optimizer (outstanding gradient reductions and the norm). comm MB: bytes per rank and step over all_reduce + reduce_scatter + all_gather (\`comm_bytes\`)."
  if [ -n "$busbw" ]; then
    echo "- hidden: 1 − exposed / total, clamped to [0, 1], with total = (2·all_reduce + reduce_scatter + all_gather bytes) · (dp−1)/dp / busbw (busbw = $busbw GB/s, as \`--busbw-gbs\`) and exposed = the reduce time. Stage-3 parameter gathers waited for inside forward and backward are not in the exposed time, so for stage 3 this is an upper bound."
  else
    echo "- hidden: not computed (no \`--busbw-gbs\`)."
  fi
  echo "- bubble (pipeline only): median of \`bubble_measured\` (idle over compute, averaged over stages) / the schedule's (P−1)/(V·M), as \`report_pipeline_timing\` writes them."
  for model in "${model_list[@]}"; do
    echo
    echo "## Model \`$model\`"
    for m in "${modes[@]}"; do
      echo
      if [ "$m" = weak ]; then
        echo "### Weak scaling: micro-batch $mb0 × accumulation $acc0 per data-parallel rank, global batch $per_rank × dp"
      else
        echo "### Strong scaling: global batch $g_strong (micro-batch lowered only where it does not divide the batch per rank)"
      fi
      echo
      echo "| run | ranks | P:V | dp | ZeRO | micro×accum | global batch | tokens/s | tokens/s/rank | efficiency | final loss | max rel. Δloss | peak MiB/rank | est. MiB | measured/est. | peak by tag (MiB) | reduce ms/step | comm MB/step | hidden | bubble meas. / sched. |"
      echo "| --- | ---: | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |"
      printf '%s' "${md[$m|$model]:-}"
      for s in ${skipped[@]+"${skipped[@]}"}; do
        IFS='|' read -r sm smodel stext <<<"$s"
        if [ "$sm|$smodel" = "$m|$model" ]; then echo; echo "Not run: $stext."; fi
      done
      echo
      echo "Commands:"
      echo
      printf '%s' "${cm[$m|$model]:-}"
    done
  done
} >"$tmp"
mv "$tmp" "$out"
echo "scaling: wrote $out and $tsv" >&2
if ((failures)); then
  echo "scaling: $failures configuration(s) failed (see FAILED above and in $out)" >&2
  exit 1
fi
