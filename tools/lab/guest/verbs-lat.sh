# shellcheck shell=bash
# guest: only the latency rows of the verbs step (LAB_METRIC verbs_lat: perftest's
# ib_send_lat beside rpcrdma-perf lat over verbs), RUNS times on each DEVICE alone on
# eth0, without the conformance suite and the engine modules. Driven by
# tools/lab/verbs-lat.sh.
#   usage: verbs-lat.sh PERF_BIN RUNS DEVICE...
# env: LAT_STRACE=1  also count the system calls of one rpcrdma-perf lat run per device
#                    (strace -f -c, RPC row alone and with the fabric baseline), to
#                    $LAB_OUT/strace-DEVICE-{rpc,all}.log
#      LAT_PROBE=BIN a program printing what a clock read and a system call cost here
set -uo pipefail
. "$(dirname "$0")/common.sh"
PERF_BIN=${1:?usage: verbs-lat.sh PERF_BIN RUNS DEVICE...}
RUNS=${2:?runs}
shift 2
DEVICES=("$@"); [ ${#DEVICES[@]} -gt 0 ] || DEVICES=(rxe0 siw0)
[ -x "$PERF_BIN" ] || fail "rpcrdma-perf binary $PERF_BIN missing (build it on the host first)"
step "load rdma_rxe, siw, rdma_ucm"
load_rdma_modules
ulimit -l unlimited || fail "ulimit -l unlimited"
echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)" \
  "(available: $(cat /sys/devices/system/clocksource/clocksource0/available_clocksource))"
[ -z "${LAT_PROBE:-}" ] || "$LAT_PROBE"
port_active() { ibv_devinfo -d "$1" 2>/dev/null | grep -q 'state:.*PORT_ACTIVE'; }
for dev in "${DEVICES[@]}"; do
  case $dev in rxe*) type=rxe ;; siw*) type=siw ;; *) fail "unknown device $dev" ;; esac
  rdma link add "$dev" type "$type" netdev eth0 || fail "rdma link add $dev"
  wait_for 30 "$dev port active" port_active "$dev"
  if [ -n "${LAT_STRACE:-}" ]; then
    for rows in rpc all; do
      step "strace -f -c rpcrdma-perf lat on $dev ($rows)"
      b=--no-baseline; [ $rows = all ] && b=--baseline
      RPCRDMA_VERBS_DEV=$dev RPCRDMA_VERBS_IP=$LAB_GUEST_IP timeout 300 \
        strace -f -c -o "${LAB_OUT:-/tmp}/strace-$dev-$rows.log" "$PERF_BIN" lat \
        --provider verbs --size 64 --iters 1000 --warmup 100 "$b" 2>&1 | grep -E '^lat|^mode'
      cat "${LAB_OUT:-/tmp}/strace-$dev-$rows.log"
    done
  fi
  for n in $(seq 1 "$RUNS"); do
    step "verbs_lat on $dev, run $n of $RUNS"
    ENGINE_MODULES='' PERF_BIN=$PERF_BIN bash "$(dirname "$0")/verbs-engine.sh" "$dev" ||
      fail "verbs_lat on $dev, run $n"
  done
  rdma link delete "$dev" || fail "rdma link delete $dev"
done
step "verbs_lat ran $RUNS times on ${DEVICES[*]}"
