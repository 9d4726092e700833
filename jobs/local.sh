#!/usr/bin/env bash
# Runs ztrain on this machine under mpirun.
#   jobs/local.sh NP CONFIG.json [ztrain options...]
#
# SIGTERM to this script (how a batch system or `kill` ends a job) reaches
# the ranks as SIGUSR1 through mpirun, which forwards it: every rank finishes
# its step, the checkpoint is saved (with checkpoint.dir) and the job exits 0.
# mpirun itself answers SIGTERM by killing the ranks one second later and
# exiting 1, too soon for a save; OMPI_MCA_odls_base_sigkill_timeout (seconds,
# default here 60) is how long it waits when SIGTERM reaches it directly.
#
# The run's working directory is the repository root, so relative paths in
# the config and in the options (--log-dir, --set data.train=...) are the
# repository's; CONFIG itself may also be given relative to where the script
# is called from. BUILD_DIR (default build) is where the binaries are.
set -euo pipefail
usage="usage: jobs/local.sh NP CONFIG.json [ztrain options...]"
np=${1:?$usage}
config=${2:?$usage}
if ! [[ $np =~ ^[1-9][0-9]*$ ]]; then
  echo "jobs/local.sh: NP must be a number of ranks >= 1, found '$np' ($usage)" >&2
  exit 2
fi
shift 2
# CONFIG as given from the caller's directory, if it is there.
if [ -f "$config" ]; then config=$(cd "$(dirname "$config")" && pwd)/$(basename "$config"); fi
cd "$(dirname "$0")/.."
if [ ! -f "$config" ]; then
  echo "jobs/local.sh: config '$config' not found (from the caller's directory or the repository root)" >&2
  exit 2
fi
bin=${BUILD_DIR:-build}/bin/ztrain
if [ ! -x "$bin" ]; then
  echo "jobs/local.sh: $bin not found: build first (jobs/setup.sh), or set BUILD_DIR" >&2
  exit 2
fi
flags=(--oversubscribe --bind-to none)
if [ "$(id -u)" = 0 ]; then flags+=(--allow-run-as-root); fi
# The config, its data and the options are checked first by a dry run under
# Open MPI's own kill timeout: with the long one below, mpirun lingers two
# minutes after ranks that exit with an error, as they do on bad input.
case " $* " in
  *" --dry-run "* | *" --estimate-memory "* | *" --help "* | *" -h "* | *" --version "*) ;;
  *)
    check=$(mktemp)
    set +e
    OMPI_MCA_odls_base_sigkill_timeout=1 mpirun "${flags[@]}" -np "$np" "$bin" "$config" "$@" --dry-run > "$check" 2>&1
    rc=$?
    set -e
    if [ "$rc" != 0 ]; then
      grep -v '^ \|^[{}]' "$check" >&2 || true
      rm -f "$check"
      exit "$rc"
    fi
    rm -f "$check"
    ;;
esac
export OMPI_MCA_odls_base_sigkill_timeout=${OMPI_MCA_odls_base_sigkill_timeout:-60}
mpirun "${flags[@]}" -np "$np" "$bin" "$config" "$@" &
pid=$!
trap 'kill -USR1 "$pid" 2>/dev/null || true' TERM INT
# wait returns early when a trap runs: wait again, until mpirun is gone, for
# its exit code (bash keeps it even when mpirun ended before the first wait).
rc=0
while :; do
  wait "$pid" && rc=0 || rc=$?
  kill -0 "$pid" 2>/dev/null || break
done
exit "$rc"
