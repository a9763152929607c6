# shellcheck shell=bash
# guest half of tools/lab/verbs-interop.sh: our verbs provider on the kernel's siw0 against
# our userspace siw provider on the host, through the CLI (rpcrdma serve/call).
#   usage: verbs-interop.sh RPCRDMA_BIN HOST_PORT GUEST_PORT SERVE_SECONDS
# 1. guest `call --provider verbs` -> host `serve --provider siw` at 10.0.2.2:HOST_PORT, one
#    call per line of $LAB_OUT/cases ("name|check|shape|args"); results in $LAB_OUT/g2h-NAME.*
# 2. guest `serve --provider verbs` on LAB_GUEST_IP:GUEST_PORT until the host's calls are
#    done ($LAB_OUT/host-done) or SERVE_SECONDS pass; the host calls it through LAB_HOSTFWD
#    once $LAB_OUT/guest-serving exists.
set -uo pipefail
. "$(dirname "$0")/common.sh"
BIN=${1:?usage}; HPORT=${2:?usage}; GPORT=${3:?usage}; SECS=${4:-90}
[ -x "$BIN" ] || fail "rpcrdma binary $BIN missing (build it on the host first)"
[ -f "$LAB_OUT/cases" ] || fail "$LAB_OUT/cases missing (the host script writes it)"
step "load modules; siw0 alone on eth0"
load_rdma_modules
rdma link add siw0 type siw netdev eth0 || fail "rdma link add siw0"
wait_for 30 "siw0 port active" sh -c 'ibv_devinfo -d siw0 | grep -q PORT_ACTIVE'
export RPCRDMA_VERBS_DEV=siw0
# The CLI's default pools (64 x 256 KiB large buffers and more) outgrow the default
# RLIMIT_MEMLOCK, and ibv_reg_mr pins them: registration fails with ENOMEM.
ulimit -l unlimited || fail "ulimit -l unlimited"

step "guest verbs call -> host siw serve ($LAB_HOST_IP:$HPORT)"
while IFS='|' read -r name _ _ args; do
  # shellcheck disable=SC2086  # args is a word list
  timeout 60 "$BIN" call --provider verbs --addr "$LAB_HOST_IP:$HPORT" --json --timeout 10 $args \
    > "$LAB_OUT/g2h-$name.json" 2> "$LAB_OUT/g2h-$name.err"
  echo "g2h $name rc=$?"
done < "$LAB_OUT/cases"

step "guest verbs serve on $LAB_GUEST_IP:$GPORT (host calls through hostfwd)"
"$BIN" serve --provider verbs --addr "$LAB_GUEST_IP:$GPORT" --duration "$SECS" --max-size 262144 \
  > "$LAB_OUT/guest-serve.log" 2>&1 &
spid=$!
wait_for 30 "rpcrdma serve listening on siw0" cm_listening siw0 "$GPORT"
touch "$LAB_OUT/guest-serving"
for _ in $(seq 1 "$SECS"); do
  [ -f "$LAB_OUT/host-done" ] && break
  kill -0 "$spid" 2>/dev/null || break
  sleep 1
done
kill -INT "$spid" 2>/dev/null
wait "$spid"; rc=$?
grep -v 'calls/s 0 ' "$LAB_OUT/guest-serve.log"
# SIGINT is how we stop it once the host is done: 0 or 130 are both a clean stop.
[ "$rc" = 0 ] || [ "$rc" = 130 ] || fail "guest rpcrdma serve exited $rc"
step "guest half done"
