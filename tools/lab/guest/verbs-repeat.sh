# shellcheck shell=bash
# guest: one module of the verbs test binary, RUNS times in a row, on each DEVICE alone
# on eth0: for a failure that shows in some runs only (a lost call), without the whole
# conformance suite and every other module in between. Driven by tools/lab/verbs-repeat.sh.
#   usage: verbs-repeat.sh BINARY MODULE RUNS DEVICE...
# Each run's output lands in $LAB_OUT/repeat-DEVICE-MODULE-N.log, and after a failed
# run the kernel's view of the device's queue pairs and connections (rdma res) and the
# kernel log's tail beside it (repeat-DEVICE-MODULE-N.rdma).
set -uo pipefail
. "$(dirname "$0")/common.sh"
BIN=${1:?usage: verbs-repeat.sh BINARY MODULE RUNS DEVICE...}
MODULE=${2:?module}
RUNS=${3:?runs}
shift 3
DEVICES=("$@"); [ ${#DEVICES[@]} -gt 0 ] || DEVICES=(siw0)
[ -x "$BIN" ] || fail "test binary $BIN missing (build it on the host first)"
step "load rdma_rxe, siw, rdma_ucm"
load_rdma_modules
ulimit -l unlimited || fail "ulimit -l unlimited"
port_active() { ibv_devinfo -d "$1" 2>/dev/null | grep -q 'state:.*PORT_ACTIVE'; }
for dev in "${DEVICES[@]}"; do
  case $dev in rxe*) type=rxe ;; siw*) type=siw ;; *) fail "unknown device $dev" ;; esac
  rdma link add "$dev" type "$type" netdev eth0 || fail "rdma link add $dev"
  wait_for 30 "$dev port active" port_active "$dev"
  for n in $(seq 1 "$RUNS"); do
    step "$MODULE on $dev, run $n of $RUNS"
    log=${LAB_OUT:-/tmp}/repeat-$dev-$MODULE-$n.log
    # shellcheck disable=SC2086  # VERBS_TEST_ARGS is a word list on purpose
    RPCRDMA_VERBS_DEV=$dev RPCRDMA_VERBS_IP=$LAB_GUEST_IP timeout "${VERBS_TIMEOUT:-400}" \
      "$BIN" ${VERBS_TEST_ARGS:---test-threads=1} "$MODULE::" > "$log" 2>&1
    rc=$?
    grep -v '^LAB_METRIC' "$log" | tail -n 25
    summary=$(grep -E '^test result:' "$log" | tail -n 1 | sed -E 's/.* ([0-9]+) passed; ([0-9]+) failed.*/passed=\1 failed=\2/')
    echo "LAB_METRIC verbs_repeat dev=$dev module=$MODULE run=$n rc=$rc ${summary:-no-summary}"
    if [ "$rc" != 0 ]; then
      { rdma res show qp; rdma res show cm_id | head -n 40; dmesg | tail -n 60; } \
        > "${LAB_OUT:-/tmp}/repeat-$dev-$MODULE-$n.rdma" 2>&1
    fi
  done
  rdma link delete "$dev" || fail "rdma link delete $dev"
done
step "repeated $MODULE $RUNS times on ${DEVICES[*]}"
