#!/bin/bash
# Boots the lab guest, runs one guest script in it, and turns the outcome into an exit status.
#
# usage: run.sh [-t SECONDS] [-e NAME=VALUE]... [-C GUEST_CWD] [-o RUN_DIR] [-q] SCRIPT [ARG]...
#   SCRIPT   a bash script on the host (run with bash inside the guest; the guest sees the
#            host's whole / read-only with a tmpfs overlay, so host-built binaries run there)
#   -t       timeout for the whole boot+test, default 600 s (TCG is slow; be generous)
#   -e       environment variable for the script (repeatable)
#   -C       working directory in the guest (default: the current directory)
#   -o       run directory, shared with the guest as /out (default $LAB/runs/NAME-TIMESTAMP);
#            it gets console.log (whole serial console), guest.log (the script's output),
#            rc, booted, dmesg.log and whatever the script writes to $LAB_OUT
#   -q       do not stream the console to stdout (it still goes to console.log)
# env: LAB_BOOT_TIMEOUT (default 240 s): give up early if the guest's init never starts;
#      LAB_BOOT_RETRIES (default 1): boots tried again after such a stuck boot;
#      qemu settings as listed in lib.sh (LAB_HOSTFWD, LAB_MEM, LAB_SMP, ...)
# exit: 0 test passed, 1 test failed, 2 guest failed to boot, 3 timed out, 4 usage/lab error
#
# Host files changed after the guest booted may be stale inside it (9p cache=loose): build
# everything before calling this.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

TIMEOUT=600 BOOT_TIMEOUT=${LAB_BOOT_TIMEOUT:-240} RUN='' QUIET='' CWD=$PWD ENVS=()
while getopts "t:e:C:o:qh" opt; do
  case $opt in
    t) TIMEOUT=$OPTARG ;;
    e) [[ $OPTARG == [A-Za-z_]*=* ]] || lab_die "-e wants NAME=VALUE, got '$OPTARG'"; ENVS+=("$OPTARG") ;;
    C) CWD=$OPTARG ;;
    o) RUN=$OPTARG ;;
    q) QUIET=1 ;;
    *) sed -n '2,/^set /p' "$0" | sed '$d' >&2; exit 4 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || lab_die "usage: run.sh [-t SECONDS] [-e NAME=VALUE]... [-C DIR] [-o RUN_DIR] [-q] SCRIPT [ARG]..."
TEST=$(readlink -f "$1") || lab_die "cannot resolve $1"; shift
[ -f "$TEST" ] || lab_die "guest script $TEST not found"
[[ $TIMEOUT =~ ^[0-9]+$ ]] || lab_die "bad timeout '$TIMEOUT'"
lab_load_kernel
command -v qemu-system-x86_64 >/dev/null || lab_die "qemu-system-x86_64 missing: run tools/lab/setup.sh"

NAME=$(basename "$TEST" .sh)
[ -n "$RUN" ] || RUN=$LAB/runs/$NAME-$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$RUN" || lab_die "cannot create $RUN"
RUN=$(readlink -f "$RUN")
rm -f "$RUN"/{lab-run.sh,booted,rc,console.log,guest.log,dmesg.log}

# Everything the guest needs to know travels in this file rather than on the kernel command
# line: no length limit, and bash quoting survives any argument or value.
{
  printf 'LAB_TEST=%q\nLAB_CWD=%q\nLAB_RUN_NAME=%q\nLAB_ARGS=(' "$TEST" "$CWD" "$NAME"
  for a in "$@"; do printf ' %q' "$a"; done
  printf ' )\n'
  for kv in "${ENVS[@]}"; do printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}"; done
} > "$RUN/lab-run.sh"

echo "lab: running $NAME (timeout ${TIMEOUT}s, kernel $KV, run dir $RUN)"
START=$SECONDS
# boot_once [KAPPEND]: one qemu boot; sets QRC and BOOT_STUCK.
boot_once() {
  local qpid tpid=
  lab_qemu_args "$RUN" "lab.batch $1"
  : > "$RUN/console.log"
  timeout -k 15 "$TIMEOUT" qemu-system-x86_64 "${QEMU_ARGS[@]}" </dev/null >"$RUN/console.log" 2>&1 &
  qpid=$!
  [ -n "$QUIET" ] || { tail -n +1 -f --pid="$qpid" "$RUN/console.log" & tpid=$!; }
  # A guest that cannot boot must not cost the whole test timeout: give up on it after
  # BOOT_TIMEOUT and say so, separately from a test that hangs.
  local t0=$SECONDS
  BOOT_STUCK=
  while kill -0 "$qpid" 2>/dev/null; do
    grep -q -e LAB_BOOTED -e LAB_BOOT_FAILED "$RUN/console.log" 2>/dev/null && break
    if [ $((SECONDS - t0)) -ge "$BOOT_TIMEOUT" ]; then BOOT_STUCK=1; kill "$qpid"; break; fi
    sleep 1
  done
  wait "$qpid"; QRC=$?
  [ -z "$tpid" ] || wait "$tpid"
}
# A boot that never reaches init and prints nothing has happened once in CI (TCG on a
# busy host; the same kernel and arguments booted in 9 s in every other step). One more
# boot is cheaper than a red run and cannot hide a test failure: it is only tried when the
# guest never started the test. The retry boots with every kernel message on the console
# (ignore_loglevel), so a second hang shows where the kernel stopped.
boot_once ""
for ((try = 1; try <= ${LAB_BOOT_RETRIES:-1}; try++)); do
  [ -n "$BOOT_STUCK" ] && [ ! -f "$RUN/rc" ] && [ ! -f "$RUN/booted" ] || break
  echo "lab: the guest did not reach its init within ${BOOT_TIMEOUT}s; console so far:"
  tail -n 15 "$RUN/console.log" | tr -d '\r'
  cp "$RUN/console.log" "$RUN/console-stuck-$try.log"
  echo "lab: booting again (retry $try of ${LAB_BOOT_RETRIES:-1}, with ignore_loglevel)"
  boot_once "ignore_loglevel"
done
ELAPSED=$((SECONDS - START))

last_lines() { echo "---- last console lines ($RUN/console.log):"; tail -n "${1:-25}" "$RUN/console.log" | tr -d '\r'; echo "----"; }
booted() { [ -f "$RUN/booted" ] || grep -q LAB_BOOTED "$RUN/console.log" 2>/dev/null; }

if [ -f "$RUN/rc" ]; then
  RC=$(cat "$RUN/rc")
  if [ "$RC" = 0 ]; then
    echo "lab: PASS $NAME in ${ELAPSED}s (guest booted in $(cat "$RUN/booted")s)"
    exit 0
  fi
  [ -n "$QUIET" ] && last_lines 40
  echo "lab: TEST FAILED: $NAME exited $RC inside the guest after ${ELAPSED}s (log: $RUN/guest.log)"
  exit 1
fi
if [ -n "$BOOT_STUCK" ] || grep -q LAB_BOOT_FAILED "$RUN/console.log"; then
  last_lines
  echo "lab: BOOT FAILED: the guest did not reach its init$([ -n "$BOOT_STUCK" ] && echo " within ${BOOT_TIMEOUT}s (LAB_BOOT_TIMEOUT)") (qemu exit $QRC after ${ELAPSED}s)"
  exit 2
fi
if [ "$QRC" = 124 ] || [ "$QRC" = 137 ]; then
  last_lines
  if booted; then
    echo "lab: TIMED OUT: $NAME still running after ${TIMEOUT}s (the guest booted; the test hung)"
  else
    echo "lab: TIMED OUT: the guest did not finish booting within ${TIMEOUT}s"
  fi
  exit 3
fi
last_lines
if booted; then
  echo "lab: TEST FAILED: guest stopped during $NAME without a result after ${ELAPSED}s (kernel panic/oops? qemu exit $QRC)"
  exit 1
fi
echo "lab: BOOT FAILED: the guest never reached its init (qemu exit $QRC after ${ELAPSED}s)"
exit 2
