# shellcheck shell=bash
# guest: the RPC engine over the verbs provider on one device that is already alone on
# eth0 (called by verbs-conformance.sh after its conformance run on that device).
#   usage: verbs-engine.sh DEVICE [BINARY]
# env: ENGINE_MODULES  space-separated engine_verbs* modules of BINARY (the verbs test
#                      binary built on the host), each run in a process of its own
#      VERBS_TEST_ARGS, VERBS_TIMEOUT as for verbs-conformance.sh
# Each module's output lands in $LAB_OUT/engine-DEVICE-MODULE.log, judged test by test on
# the host (tools/lab/verbs.sh). Fails only when a run did not finish (crash, timeout).
set -uo pipefail
. "$(dirname "$0")/common.sh"
DEV=${1:?usage: verbs-engine.sh DEVICE [BINARY]}
BIN=${2:-}
# Kernel siw counts registered pages against RLIMIT_MEMLOCK even for root (rxe lets
# CAP_IPC_LOCK through): send-based DDP's 1 MiB segments go past the default limit.
ulimit -l unlimited || fail "ulimit -l unlimited"
SKIP=()
# iwarp_* tests pair the kernel device with our userspace iWARP provider.
case $DEV in rxe*) SKIP=(--skip iwarp_) ;; esac
# shellcheck disable=SC2206  # a word list on purpose
MODULES=(${ENGINE_MODULES:-})
[ ${#MODULES[@]} = 0 ] || [ -x "$BIN" ] || fail "test binary '$BIN' missing (build it on the host first)"
for name in "${MODULES[@]}"; do
  # One module per run: skip the conformance suite and every other module ("NAME::" is a
  # prefix of NAME's tests only, never of engine_verbs_inline's when NAME is engine_verbs).
  only=(--skip fabric_verbs_conformance::)
  for other in "${MODULES[@]}"; do [ "$other" = "$name" ] || only+=(--skip "$other::"); done
  step "$name on $DEV"
  log=${LAB_OUT:-/tmp}/engine-$DEV-$name.log
  # shellcheck disable=SC2086  # VERBS_TEST_ARGS is a word list on purpose
  RPCRDMA_VERBS_DEV=$DEV RPCRDMA_VERBS_IP=$LAB_GUEST_IP timeout "${VERBS_TIMEOUT:-400}" \
    "$BIN" ${VERBS_TEST_ARGS:-} "${SKIP[@]}" "${only[@]}" > "$log" 2>&1
  rc=$?
  cat "$log"
  summary=$(grep -E '^test result:' "$log" | tail -n 1 | sed -E 's/.* ([0-9]+) passed; ([0-9]+) failed.*/passed=\1 failed=\2/')
  echo "LAB_METRIC verbs_engine dev=$DEV bin=$name rc=$rc ${summary:-no-summary}"
  [ "$rc" = 0 ] || [ "$rc" = 101 ] || fail "$name on $DEV did not finish (rc=$rc)"
done

# rpcrdma-perf lat over verbs beside perftest's ib_send_lat, same device, same boot, same
# size. TCG makes absolute times meaningless; the ratios are what we track.
[ -n "${PERF_BIN:-}" ] || exit 0
[ -x "$PERF_BIN" ] || fail "rpcrdma-perf binary $PERF_BIN missing (build it on the host first)"
SIZE=${PERF_SIZE:-64}
CM=(); [[ $DEV == siw* ]] && CM=(-R)  # iWARP: perftest must connect through rdma_cm
step "ib_send_lat on $DEV (size $SIZE)"
base=
for try in 1 2 3; do
  port=$((7100 + try))
  timeout 120 ib_send_lat -d "$DEV" -p "$port" -s "$SIZE" -n 1000 -F "${CM[@]}" > /tmp/lat-s.log 2>&1 &
  spid=$!
  if [ ${#CM[@]} = 1 ]; then
    wait_for 30 "ib_send_lat server on $DEV" cm_listening "$DEV" "$port"
  else
    wait_for 30 "ib_send_lat server on $DEV" tcp_listening "$port"
  fi
  # Under TCG an iWARP listener can refuse the first connection although rdma_cm shows
  # it listening: a refused try is retried on a fresh port, three tries in all.
  if ! out=$(timeout 120 ib_send_lat -d "$DEV" -p "$port" -s "$SIZE" -n 1000 -F "${CM[@]}" "$LAB_GUEST_IP" 2>&1); then
    echo "$out"; echo "ib_send_lat client on $DEV failed (try $try of 3)"
    kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null; base=; continue
  fi
  wait "$spid" || { cat /tmp/lat-s.log; fail "ib_send_lat server on $DEV"; }
  echo "$out"
  # perftest's t_typical (the median) beside our p50.
  base=$(echo "$out" | awk '$1 ~ /^[0-9]+$/ && NF >= 9 {print $5; exit}')
  case $base in ''|*inf*|*nan*) base= ;; *) break ;; esac
done
[ -n "$base" ] || fail "ib_send_lat on $DEV: no latency after 3 tries"
step "rpcrdma-perf lat --provider verbs on $DEV (size $SIZE)"
# Every device runs the RPC row: where fast registration is missing (siw0: no memory
# windows) the requester registers its chunk pools persistently (Registration::Auto).
perf=$(RPCRDMA_VERBS_DEV=$DEV RPCRDMA_VERBS_IP=$LAB_GUEST_IP timeout 300 "$PERF_BIN" lat \
         --provider verbs --size "$SIZE" --iters "${PERF_ITERS:-1000}" --warmup 100 --baseline 2>&1)
rc=$?
echo "$perf"
[ "$rc" = 0 ] || fail "rpcrdma-perf lat on $DEV exited $rc"
# A failed row prints its error where the numbers go: numbers only.
p50() { echo "$perf" | awk -v l="$1" -v b="$2" '$1 == "lat" && $2 == l && $3 == b && $7 ~ /^[0-9.]+$/ {print $7; exit}'; }
fab=$(p50 fabric send/recv); rpc=$(p50 rpc echo)
[ -n "$fab" ] || fail "no fabric send/recv row from rpcrdma-perf on $DEV"
[ -n "$rpc" ] || fail "no rpc echo row from rpcrdma-perf on $DEV"
# ib_send_lat reports half a round trip (its t_typical is the ping-pong time over two);
# our rows are whole round trips, so the like-for-like figure is twice t_typical.
rtt=$(awk -v b="$base" 'BEGIN {printf "%.2f", 2 * b}')
ratio() { if [ -n "$1" ] && [ -n "$rtt" ]; then awk -v a="$1" -v b="$rtt" 'BEGIN {printf "%.2f", a / b}'; else echo n/a; fi; }
echo "LAB_METRIC verbs_lat dev=$DEV size=$SIZE ib_send_lat_typical_us=${base:-unavailable} ib_send_lat_rtt_us=$rtt fabric_p50_us=$fab rpc_echo_p50_us=${rpc:-unavailable} fabric_vs_ib_send_lat_rtt=x$(ratio "$fab") rpc_vs_ib_send_lat_rtt=x$(ratio "$rpc")"
