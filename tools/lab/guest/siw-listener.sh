# guest: siw0 on eth0 with an rping server on port 5555 for a host-side iWARP peer (the
# host reaches it through a qemu hostfwd; see mpa-check.sh). Prints GUEST_SIW_READY once the
# listener is up, then waits for one connection from the host and checks that the kernel
# took it to ESTABLISHED (i.e. siw accepted the host's MPA Request and sent its Reply).
set -uo pipefail
. "$(dirname "$0")/common.sh"
PORT=${SIW_PORT:-5555}
WAIT=${SIW_WAIT:-240}

step "load modules and create siw0"
for m in siw rdma_ucm; do modprobe "$m" || fail "modprobe $m"; done
rdma link add siw0 type siw netdev eth0 || fail "rdma link add siw0"

step "rping server on $LAB_GUEST_IP:$PORT"
# -d prints every rdma_cm event, which is what the checks below read.
timeout $((WAIT + 60)) rping -s -a "$LAB_GUEST_IP" -p "$PORT" -C 1 -v -d > /tmp/rping.log 2>&1 &
RPID=$!
wait_for 60 "rping listening on siw0:$PORT" cm_listening siw0 "$PORT"
echo GUEST_SIW_READY

step "wait for the host's connection"
wait_for "$WAIT" "a connection from the host" grep -q ESTABLISHED /tmp/rping.log
# The host closes after the MPA exchange; rping then sees the disconnect and exits (with
# an error, as no ping was exchanged: that is expected, not checked).
wait_for 60 "rping to see the host disconnect" sh -c "! kill -0 $RPID"
cat /tmp/rping.log
grep -q CONNECT_REQUEST /tmp/rping.log || fail "no CONNECT_REQUEST event"
grep -q ESTABLISHED /tmp/rping.log || fail "no ESTABLISHED event"
echo "SIW_LISTENER_OK"
