# shellcheck shell=bash
# guest half of tools/lab/verbs-interop.sh: our verbs provider on the kernel's siw0 against
# our userspace siw provider on the host, through the CLI (rpcrdma serve/call).
#   usage: verbs-interop.sh RPCRDMA_BIN HOST_PORT GUEST_PORT SERVE_SECONDS
# 1. guest `call --provider verbs` -> host `serve --provider siw` at 10.0.2.2:HOST_PORT
#    (results in $LAB_OUT/g2h-*.json, or the refusal in g2h-*.err)
# 2. guest `serve --provider verbs` on LAB_GUEST_IP:GUEST_PORT for SERVE_SECONDS; the host
#    calls it through LAB_HOSTFWD once $LAB_OUT/guest-serving exists.
set -uo pipefail
. "$(dirname "$0")/common.sh"
BIN=${1:?usage}; HPORT=${2:?usage}; GPORT=${3:?usage}; SECS=${4:-60}
[ -x "$BIN" ] || fail "rpcrdma binary $BIN missing (build it on the host first)"
step "load modules; siw0 alone on eth0"
load_rdma_modules
rdma link add siw0 type siw netdev eth0 || fail "rdma link add siw0"
wait_for 30 "siw0 port active" sh -c 'ibv_devinfo -d siw0 | grep -q PORT_ACTIVE'
export RPCRDMA_VERBS_DEV=siw0
# The CLI's default pools (64 x 256 KiB large buffers and more) outgrow the default
# RLIMIT_MEMLOCK, and ibv_reg_mr pins them: registration fails with ENOMEM.
ulimit -l unlimited || fail "ulimit -l unlimited"

step "guest verbs call -> host siw serve ($LAB_HOST_IP:$HPORT)"
g2h() {
  local name=$1; shift
  timeout 60 "$BIN" call --provider verbs --addr "$LAB_HOST_IP:$HPORT" --json "$@" \
    > "$LAB_OUT/g2h-$name.json" 2> "$LAB_OUT/g2h-$name.err"
  echo "g2h $name rc=$? $(cat "$LAB_OUT/g2h-$name.json" "$LAB_OUT/g2h-$name.err" | head -c 400)"
}
g2h null --null
g2h echo-rw --echo --size 40001 --read-chunk --write-chunk

step "guest verbs serve on $LAB_GUEST_IP:$GPORT for ${SECS}s (host calls through hostfwd)"
"$BIN" serve --provider verbs --addr "$LAB_GUEST_IP:$GPORT" --duration "$SECS" --max-size 262144 \
  > "$LAB_OUT/guest-serve.log" 2>&1 &
spid=$!
wait_for 30 "rpcrdma serve listening on siw0" cm_listening siw0 "$GPORT"
touch "$LAB_OUT/guest-serving"
wait "$spid"; rc=$?
cat "$LAB_OUT/guest-serve.log"
[ "$rc" = 0 ] || fail "guest rpcrdma serve exited $rc"
step "guest half done"
