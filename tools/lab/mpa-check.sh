#!/bin/bash
# Host <-> guest iWARP check: boots the guest with guest/siw-listener.sh (kernel siw + an
# rping server), forwards a free host port on 127.0.0.1 to it, and runs mpa-probe.py
# through the forward: passes when the guest's siw answers the host's MPA Request with an
# accepted MPA Reply AND the guest saw the connection reach ESTABLISHED.
# exit: 0 pass, 1 check failed, 2/3/4 as run.sh (boot failed / timed out / lab error)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
PORT=${MPA_HOST_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
RUN=$LAB/runs/mpa-check-$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$RUN"
LAB_HOSTFWD="hostfwd=tcp:127.0.0.1:$PORT-:5555" "$HERE/run.sh" -q -t "${MPA_TIMEOUT:-420}" -o "$RUN" \
  "$HERE/guest/siw-listener.sh" &
RPID=$!

READY=
for _ in $(seq 1 "${MPA_READY_WAIT:-300}"); do
  grep -q GUEST_SIW_READY "$RUN/console.log" 2>/dev/null && { READY=1; break; }
  kill -0 "$RPID" 2>/dev/null || break
  sleep 1
done
PROBE=1
if [ -n "$READY" ]; then
  echo "mpa-check: guest listener ready; probing 127.0.0.1:$PORT"
  python3 "$HERE/mpa-probe.py" 127.0.0.1 "$PORT" 60; PROBE=$?
else
  echo "mpa-check: guest listener never became ready"
  kill "$RPID" 2>/dev/null
fi
wait "$RPID"; GRC=$?
sed -n '/^==> /p;/cma_event type/p;/SIW_LISTENER_OK/p;/GUEST FAIL/p' "$RUN/console.log" | tr -d '\r'
if [ "$GRC" = 0 ] && [ "$PROBE" = 0 ]; then echo "mpa-check: PASS"; exit 0; fi
echo "mpa-check: FAILED (probe exit $PROBE, guest run.sh exit $GRC; see $RUN)"
[ "$GRC" -ge 2 ] && exit "$GRC"
exit 1
