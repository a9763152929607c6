#!/bin/bash
# Runs one module of the verbs test binary RUNS times on each DEVICE in one lab boot
# (guest/verbs-repeat.sh), for failures that show in some runs only; the whole suite is
# tools/lab/verbs.sh. Serialize with the other lab users:
#   flock /tmp/rpcrdma-lab.lock bash tools/lab/verbs-repeat.sh MODULE RUNS [DEVICE...]
# e.g. engine_verbs_group_memory 5 siw0. Prints one line per run
# (LAB_METRIC verbs_repeat ... rc=0 passed=N failed=M); logs in the run directory.
# exit: 0 when every run passed, 1 when some failed, run.sh's status when the lab failed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"
# The guest's clock on the TSC, as production hosts read it (lib.sh, lab_clock_args).
export LAB_GUEST_TSC=${LAB_GUEST_TSC:-1}
MODULE=${1:?usage: verbs-repeat.sh MODULE RUNS [DEVICE...]}
RUNS=${2:?usage: verbs-repeat.sh MODULE RUNS [DEVICE...]}
shift 2
DEVS=("$@"); [ ${#DEVS[@]} -gt 0 ] || DEVS=(siw0)
cd "$ROOT" || exit 4
BIN=$(cargo test -p rpcrdma --features verbs --test verbs --no-run \
        --message-format=json 2>"$LAB/verbs-build.log" |
      sed -n 's/.*"executable":"\([^"]*\/verbs-[0-9a-f]*\)".*/\1/p' | tail -n 1)
[ -n "$BIN" ] && [ -x "$BIN" ] || { tail -n 40 "$LAB/verbs-build.log"; exit 5; }
RUN=$LAB/runs/verbs-repeat-$(date +%Y%m%d-%H%M%S)-$$
QOPT=(-q); [ -n "${LAB_VERBOSE:-}" ] && QOPT=()
"$HERE/run.sh" "${QOPT[@]}" -t $((240 + RUNS * 150 * ${#DEVS[@]})) -o "$RUN" \
  -e VERBS_TIMEOUT="${VERBS_TIMEOUT:-400}" \
  "$HERE/guest/verbs-repeat.sh" "$BIN" "$MODULE" "$RUNS" "${DEVS[@]}"
RC=$?
grep -E 'LAB_METRIC verbs_repeat' "$RUN/guest.log" 2>/dev/null
[ "$RC" = 0 ] || { echo "verbs-repeat: the lab run failed (run.sh exit $RC, $RUN)"; exit "$RC"; }
if grep -q 'LAB_METRIC verbs_repeat .* rc=[1-9]' "$RUN/guest.log"; then
  echo "verbs-repeat: some runs failed ($RUN)"; exit 1
fi
echo "verbs-repeat: $RUNS of $RUNS passed on ${DEVS[*]} ($RUN)"
