#!/bin/bash
# Runs only the verbs step's latency comparison (LAB_METRIC verbs_lat: ib_send_lat beside
# rpcrdma-perf lat over verbs) RUNS times on each DEVICE in one lab boot
# (guest/verbs-lat.sh), a few minutes instead of the whole verbs step. Serialize:
#   flock /tmp/rpcrdma-lab.lock bash tools/lab/verbs-lat.sh RUNS [DEVICE...]
# env: LAT_STRACE=1 (system call counts per device, see guest/verbs-lat.sh), LAT_PROBE,
#      LAB_KAPPEND (more guest kernel arguments), LAB, LAB_VERBOSE as for ci.sh
# Prints the LAB_METRIC verbs_lat lines; logs in the run directory.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"
# The guest's clock on the TSC, as production hosts read it (lib.sh, lab_clock_args).
export LAB_GUEST_TSC=${LAB_GUEST_TSC:-1}
RUNS=${1:?usage: verbs-lat.sh RUNS [DEVICE...]}
shift
DEVS=("$@"); [ ${#DEVS[@]} -gt 0 ] || DEVS=(rxe0 siw0)
cd "$ROOT" || exit 4
if ! cargo build -q --release -p rpcrdma-perf --features verbs 2>"$LAB/verbs-perf-build.log"; then
  tail -n 40 "$LAB/verbs-perf-build.log"; exit 5
fi
RUN=$LAB/runs/verbs-lat-$(date +%Y%m%d-%H%M%S)-$$
QOPT=(-q); [ -n "${LAB_VERBOSE:-}" ] && QOPT=()
"$HERE/run.sh" "${QOPT[@]}" -t $((240 + RUNS * 120 * ${#DEVS[@]} + ${LAT_STRACE:+300} + 0)) -o "$RUN" \
  -e LAT_STRACE="${LAT_STRACE:-}" -e LAT_PROBE="${LAT_PROBE:-}" \
  "$HERE/guest/verbs-lat.sh" "$ROOT/target/release/rpcrdma-perf" "$RUNS" "${DEVS[@]}"
RC=$?
grep -E '^clocksource|ns/call|ns/iter|LAB_METRIC verbs_lat' "$RUN/guest.log" 2>/dev/null
[ "$RC" = 0 ] || { echo "verbs-lat: the lab run failed (run.sh exit $RC, $RUN)"; exit "$RC"; }
echo "verbs-lat: logs in $RUN"
