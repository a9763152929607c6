# shellcheck shell=bash
# guest: the RPC engine over the verbs provider on one device that is already alone on
# eth0 (called by verbs-conformance.sh after its conformance run on that device).
#   usage: verbs-engine.sh DEVICE
# env: ENGINE_BINS  space-separated engine_verbs* test binaries (built on the host)
#      VERBS_TEST_ARGS, VERBS_TIMEOUT as for verbs-conformance.sh
# Each binary's output lands in $LAB_OUT/engine-DEVICE-NAME.log, judged test by test on
# the host (tools/lab/verbs.sh). Fails only when a binary did not finish (crash, timeout).
set -uo pipefail
. "$(dirname "$0")/common.sh"
DEV=${1:?usage: verbs-engine.sh DEVICE}
SKIP=()
# iwarp_* tests pair the kernel device with our userspace iWARP provider.
case $DEV in rxe*) SKIP=(--skip iwarp_) ;; esac
for bin in ${ENGINE_BINS:-}; do
  [ -x "$bin" ] || fail "test binary $bin missing (build it on the host first)"
  name=$(basename "$bin"); name=${name%-*}
  step "$name on $DEV"
  log=${LAB_OUT:-/tmp}/engine-$DEV-$name.log
  # shellcheck disable=SC2086  # VERBS_TEST_ARGS is a word list on purpose
  RPCRDMA_VERBS_DEV=$DEV RPCRDMA_VERBS_IP=$LAB_GUEST_IP timeout "${VERBS_TIMEOUT:-400}" \
    "$bin" ${VERBS_TEST_ARGS:-} "${SKIP[@]}" > "$log" 2>&1
  rc=$?
  cat "$log"
  summary=$(grep -E '^test result:' "$log" | tail -n 1 | sed -E 's/.* ([0-9]+) passed; ([0-9]+) failed.*/passed=\1 failed=\2/')
  echo "LAB_METRIC verbs_engine dev=$DEV bin=$name rc=$rc ${summary:-no-summary}"
  [ "$rc" = 0 ] || [ "$rc" = 101 ] || fail "$name on $DEV did not finish (rc=$rc)"
done
