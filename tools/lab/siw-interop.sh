#!/bin/bash
# Interoperability of our userspace siw provider (host) with the Linux kernel's siw (lab
# guest), rping's protocol, both directions, in one boot:
#   1. host client (engine/examples/rping.rs -c) -> guest `rping -s` on siw0, through a
#      hostfwd: MPA revision 2 start-up, our Sends, the kernel's RDMA Read and RDMA Write
#      of our buffers, validated data;
#   2. guest `rping -c -V` -> host server (rping.rs -s) on 127.0.0.1: the kernel's Sends,
#      our RDMA Read and RDMA Write of its buffers, validated by the kernel's rping.
# env: SIW_PINGS (10), SIW_SIZE (100), SIW_CRC=0 to not ask for MPA CRCs (the kernel's
#      siw then decides), SIW_TIMEOUT (whole run, 600 s), CARGO (cargo), SIW_CAPTURE=1 to
#      record the host side of both connections in RUN_DIR/host.pcap (needs tshark).
# exit: 0 pass, 1 check failed, 2/3/4 as run.sh (boot failed / timed out / lab error)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
PINGS=${SIW_PINGS:-10}
SIZE=${SIW_SIZE:-100}
CRC=(); [ "${SIW_CRC:-1}" = 0 ] && CRC=(--no-crc)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
FWD_PORT=$(free_port)
HOST_PORT=$(free_port)
RUN=$LAB/runs/siw-interop-$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$RUN"

# Build before booting: the guest may see stale host files (9p cache=loose).
(cd "$ROOT" && "${CARGO:-cargo}" build -q -p rpcrdma --example rping) || { echo "siw-interop: build failed"; exit 4; }
RPING=$ROOT/target/debug/examples/rping
[ -x "$RPING" ] || { echo "siw-interop: $RPING missing"; exit 4; }

CAP=
if [ "${SIW_CAPTURE:-0}" = 1 ]; then
  tshark -i lo -q -F pcap -w "$RUN/host.pcap" -f "tcp port $FWD_PORT or tcp port $HOST_PORT" \
    > "$RUN/tshark.log" 2>&1 &
  CAP=$!
  for _ in $(seq 1 50); do [ -s "$RUN/host.pcap" ] && break; sleep 0.2; done
fi

# Phase 2's server listens from the start; it waits for the guest's client.
"$RPING" -s -a 127.0.0.1 -p "$HOST_PORT" -C "$PINGS" -S "$SIZE" -v -t "${SIW_TIMEOUT:-600}" "${CRC[@]}" \
  > "$RUN/host-server.log" 2>&1 &
SPID=$!

LAB_HOSTFWD="hostfwd=tcp:127.0.0.1:$FWD_PORT-:5555" "$HERE/run.sh" -q -t "${SIW_TIMEOUT:-600}" -o "$RUN" \
  -e "SIW_HOST_PORT=$HOST_PORT" -e "SIW_PINGS=$PINGS" -e "SIW_SIZE=$SIZE" \
  "$HERE/guest/siw-rping.sh" &
RPID=$!

READY=
for _ in $(seq 1 "${SIW_READY_WAIT:-400}"); do
  grep -q GUEST_SIW_READY "$RUN/console.log" 2>/dev/null && { READY=1; break; }
  kill -0 "$RPID" 2>/dev/null || break
  sleep 1
done
CLIENT=1
if [ -n "$READY" ]; then
  echo "siw-interop: phase 1: host client -> kernel rping server (127.0.0.1:$FWD_PORT)"
  "$RPING" -c -a 127.0.0.1 -p "$FWD_PORT" -C "$PINGS" -S "$SIZE" -V -v -t 120 "${CRC[@]}" \
    > "$RUN/host-client.log" 2>&1
  CLIENT=$?
  cat "$RUN/host-client.log"
else
  echo "siw-interop: the guest's rping server never became ready"
  kill "$RPID" 2>/dev/null
fi
wait "$RPID"; GRC=$?
# The host server ends with the guest's client (or its own timeout).
for _ in $(seq 1 30); do kill -0 "$SPID" 2>/dev/null || break; sleep 1; done
kill "$SPID" 2>/dev/null
wait "$SPID"; SRC=$?
[ -n "$CAP" ] && { kill -INT "$CAP" 2>/dev/null; wait "$CAP"; }
echo "--- host server"; cat "$RUN/host-server.log"
echo "--- guest"
sed -n '/^==> /p;/GUEST_/p;/ping data/p;/rping/p' "$RUN/console.log" | tr -d '\r' | head -80
OK=1
if [ "$CLIENT" != 0 ] || ! grep -q "^RPING_OK $PINGS" "$RUN/host-client.log"; then
  echo "siw-interop: phase 1 (host client) failed"; OK=0
fi
if [ "$SRC" != 0 ] || ! grep -q "^RPING_OK $PINGS" "$RUN/host-server.log"; then
  echo "siw-interop: phase 2 (host server) failed"; OK=0
fi
[ "$GRC" = 0 ] || { echo "siw-interop: guest checks failed (run.sh exit $GRC)"; OK=0; }
if [ "$OK" = 1 ]; then echo "siw-interop: PASS (see $RUN)"; exit 0; fi
echo "siw-interop: FAILED (see $RUN)"
[ "$GRC" -ge 2 ] && exit "$GRC"
exit 1
