#!/bin/bash
# Host driver for the verbs provider's lab proof: builds the fabric conformance suite's
# verbs instantiation on the host (once), then boots the lab guest once and runs it there
# on each device (guest/verbs-conformance.sh: rxe0, then siw0, each alone on eth0).
#
#   usage: verbs.sh [DEVICE...]        (default: rxe0 siw0)
# env: VERBS_TEST_ARGS  extra test-binary arguments (default --test-threads=1: TCG on two
#                       vCPUs makes parallel busy-polling tests starve each other)
#      VERBS_TIMEOUT    seconds per device inside the guest (default 400)
#      LAB, LAB_VERBOSE as for ci.sh
# exit: as run.sh (0 pass, 1 test failed, 2 boot failed, 3 timeout, 4 setup) or 5 when the
# host build fails. Per-device logs: RUN_DIR/verbs-DEVICE.log.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"

cd "$ROOT" || exit 4
# The executable's path comes from cargo's JSON messages; nothing else names it reliably.
BIN=$(cargo test -p rpcrdma --features verbs --test fabric_verbs_conformance --no-run \
        --message-format=json 2>"$LAB/verbs-build.log" |
      sed -n 's/.*"executable":"\([^"]*fabric_verbs_conformance[^"]*\)".*/\1/p' | tail -n 1)
if [ -z "$BIN" ] || [ ! -x "$BIN" ]; then
  tail -n 40 "$LAB/verbs-build.log"
  echo "verbs: host build of fabric_verbs_conformance failed (log: $LAB/verbs-build.log)"
  exit 5
fi
echo "verbs: test binary $BIN"

RUN=$LAB/runs/verbs-$(date +%Y%m%d-%H%M%S)-$$
QOPT=(-q); [ -n "${LAB_VERBOSE:-}" ] && QOPT=()
"$HERE/run.sh" "${QOPT[@]}" -t 900 -o "$RUN" \
  -e VERBS_TEST_ARGS="${VERBS_TEST_ARGS:---test-threads=1}" \
  -e VERBS_TIMEOUT="${VERBS_TIMEOUT:-400}" \
  "$HERE/guest/verbs-conformance.sh" "$BIN" "$@"
RC=$?
if [ -f "$RUN/guest.log" ]; then
  grep -E '^==> |LAB_METRIC' "$RUN/guest.log"
  if [ "$RC" != 0 ]; then
    echo "---- failing tests:"
    grep -hE '^test .* FAILED$|panicked at|^  left|^ right|completion Completion' "$RUN"/verbs-*.log | head -n 80
  fi
fi
exit "$RC"
