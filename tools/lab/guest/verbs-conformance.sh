# shellcheck shell=bash
# guest: runs the fabric conformance suite's verbs instantiation (module
# fabric_verbs_conformance of the verbs test binary, built on the host) once per device,
# each while it is the only RDMA device on eth0 (rdma_cm would route every connection
# over the first device owning the address otherwise), then the engine modules of the
# same binary on that device (verbs-engine.sh).
#   usage: verbs-conformance.sh BINARY [DEVICE...]   (devices: rxe0, siw0; default both)
# env: ENGINE_MODULES  space-separated engine_verbs* modules of BINARY for verbs-engine.sh
# Extra arguments for the test binary go in VERBS_TEST_ARGS (word-split). Each device's
# output lands in $LAB_OUT/verbs-DEVICE.log, which the host (tools/lab/verbs.sh) judges
# test by test. This script fails only when a device cannot be set up or the binary did
# not finish (crash, timeout): exit 0 or 101 (some tests failed) is a finished run.
set -uo pipefail
. "$(dirname "$0")/common.sh"
BIN=${1:?usage: verbs-conformance.sh BINARY [DEVICE...]}; shift
DEVICES=("$@"); [ ${#DEVICES[@]} -gt 0 ] || DEVICES=(rxe0 siw0)
[ -x "$BIN" ] || fail "test binary $BIN missing (build it on the host first)"

step "load rdma_rxe, siw, rdma_ucm"
load_rdma_modules

port_active() { ibv_devinfo -d "$1" 2>/dev/null | grep -q 'state:.*PORT_ACTIVE'; }

FAILED=()
for dev in "${DEVICES[@]}"; do
  case $dev in
    rxe*) type=rxe ;;
    siw*) type=siw ;;
    *) fail "unknown device $dev (want rxeN or siwN)" ;;
  esac
  step "conformance on $dev alone on eth0"
  rdma link add "$dev" type "$type" netdev eth0 || fail "rdma link add $dev"
  wait_for 30 "$dev port active" port_active "$dev"
  log=${LAB_OUT:-/tmp}/verbs-$dev.log
  # The conformance module only: the engine modules (engine_verbs*) run below, each in
  # a process of its own.
  # shellcheck disable=SC2086  # VERBS_TEST_ARGS is a word list on purpose
  RPCRDMA_VERBS_DEV=$dev RPCRDMA_VERBS_IP=$LAB_GUEST_IP timeout "${VERBS_TIMEOUT:-400}" \
    "$BIN" ${VERBS_TEST_ARGS:-} --skip engine_verbs > "$log" 2>&1
  rc=$?
  cat "$log"
  # Counts only: a verbatim libtest summary line would read as this CI run's own result.
  summary=$(grep -E '^test result:' "$log" | tail -n 1 | sed -E 's/.* ([0-9]+) passed; ([0-9]+) failed.*/passed=\1 failed=\2/')
  echo "LAB_METRIC verbs_conformance dev=$dev rc=$rc ${summary:-no-summary}"
  [ "$rc" = 0 ] || [ "$rc" = 101 ] || FAILED+=("$dev")
  # The engine over verbs on the same device, in the same boot.
  if [ -n "${ENGINE_MODULES:-}${PERF_BIN:-}" ]; then
    bash "$(dirname "$0")/verbs-engine.sh" "$dev" "$BIN" || FAILED+=("$dev(engine)")
  fi
  rdma link delete "$dev" || fail "rdma link delete $dev"
done
[ ${#FAILED[@]} = 0 ] || fail "the suite did not finish on: ${FAILED[*]}"
step "verbs conformance ran on ${DEVICES[*]}"
