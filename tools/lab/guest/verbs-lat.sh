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
  runs_log=${LAB_OUT:-/tmp}/verbs-lat-$dev.log
  : > "$runs_log"
  for n in $(seq 1 "$RUNS"); do
    step "verbs_lat on $dev, run $n of $RUNS"
    ENGINE_MODULES='' PERF_BIN=$PERF_BIN bash "$(dirname "$0")/verbs-engine.sh" "$dev" \
      | tee -a "$runs_log" || fail "verbs_lat on $dev, run $n"
  done
  # Under TCG ib_send_lat itself moves by 2-3x between runs of one boot: each run's
  # ratio is taken within the run, and the median over the runs is the figure to track.
  grep '^LAB_METRIC verbs_lat ' "$runs_log" | awk -v dev="$dev" '
    function val(k,   i, f) { for (i = 1; i <= NF; i++) { split($i, f, "="); if (f[1] == k) { sub(/^x/, "", f[2]); return f[2] } } return "" }
    function median(a, n,   i, j, t) {
      for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    { f[++n] = val("fabric_vs_ib_send_lat_rtt") + 0; r[n] = val("rpc_vs_ib_send_lat_rtt") + 0
      q[n] = val("rpc_echo_p50_us") / val("fabric_p50_us") }
    END { if (n) printf "LAB_METRIC verbs_lat_median dev=%s runs=%d fabric_vs_ib_send_lat_rtt=x%.2f rpc_vs_ib_send_lat_rtt=x%.2f rpc_vs_fabric=x%.2f\n", dev, n, median(f, n), median(r, n), median(q, n) }'
  rdma link delete "$dev" || fail "rdma link delete $dev"
done
step "verbs_lat ran $RUNS times on ${DEVICES[*]}"
