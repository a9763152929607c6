# shellcheck shell=bash
# guest: kernel siw against the host's userspace siw (engine/examples/rping.rs), rping's
# protocol, both directions (driven by tools/lab/siw-interop.sh):
#   1. the host is the client: an rping server on siw0:5555 (reached through a qemu hostfwd)
#      must serve SIW_PINGS pings: it RDMA-Reads the host's buffer, RDMA-Writes it back,
#      and Sends after each step;
#   2. the host is the server: rping -c to $LAB_HOST_IP:$SIW_HOST_PORT over siw0 must
#      complete SIW_PINGS validated pings against the host (which Reads and Writes us).
# Prints GUEST_SIW_READY when phase 1 listens and GUEST_SIW_PHASE2 when phase 2 starts.
set -uo pipefail
. "$(dirname "$0")/common.sh"
PORT=5555
PINGS=${SIW_PINGS:-10}
SIZE=${SIW_SIZE:-100}
WAIT=${SIW_WAIT:-240}
: "${SIW_HOST_PORT:?the port of the rping server on the host}"

step "load modules and create siw0"
for m in siw rdma_ucm; do modprobe "$m" || fail "modprobe $m"; done
rdma link add siw0 type siw netdev eth0 || fail "rdma link add siw0"

step "phase 1: rping server on $LAB_GUEST_IP:$PORT for the host client"
timeout $((WAIT + 60)) rping -s -a "$LAB_GUEST_IP" -p "$PORT" -S "$SIZE" -v > /tmp/rping-s.log 2>&1 &
RPID=$!
wait_for 60 "rping listening on siw0:$PORT" cm_listening siw0 "$PORT"
echo GUEST_SIW_READY
# The server serves until the host disconnects, then exits (rping reports the disconnect as
# an error, which is not what is checked here).
wait_for "$WAIT" "the host client to finish" sh -c "! kill -0 $RPID"
cat /tmp/rping-s.log
SERVED=$(grep -c '^server ping data: rdma-ping-' /tmp/rping-s.log)
[ "$SERVED" -ge "$PINGS" ] || fail "kernel rping server served $SERVED pings, wanted $PINGS"
echo "GUEST_PHASE1_OK served=$SERVED"

step "phase 2: rping client to the host server at $LAB_HOST_IP:$SIW_HOST_PORT"
echo GUEST_SIW_PHASE2
timeout "$WAIT" rping -c -a "$LAB_HOST_IP" -p "$SIW_HOST_PORT" -C "$PINGS" -S "$SIZE" -V -v \
  > /tmp/rping-c.log 2>&1
RC=$?
cat /tmp/rping-c.log
[ "$RC" = 0 ] || fail "kernel rping client exited $RC"
GOT=$(grep -c '^ping data: rdma-ping-' /tmp/rping-c.log)
[ "$GOT" = "$PINGS" ] || fail "kernel rping client completed $GOT pings, wanted $PINGS"
echo "GUEST_PHASE2_OK pings=$GOT"
