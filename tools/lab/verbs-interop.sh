#!/bin/bash
# Host siw provider <-> guest verbs provider on the kernel's siw0, through the CLI, in one
# boot: host `rpcrdma serve --provider siw` called by the guest's `rpcrdma call --provider
# verbs` (at 10.0.2.2), and the guest's `rpcrdma serve --provider verbs` called by the
# host's `rpcrdma call --provider siw` through a qemu hostfwd. NULL and ECHO with a Read
# chunk in and a Write chunk out, both directions.
# exit: 0 pass, 1 a direction failed (named), 2-4 as run.sh, 5 host build failed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"
cd "$ROOT" || exit 4
cargo build -q -p rpcrdma-tools --features verbs 2>"$LAB/verbs-interop-build.log" ||
  { tail -n 30 "$LAB/verbs-interop-build.log"; echo "verbs-interop: host build failed"; exit 5; }
BIN=$ROOT/target/debug/rpcrdma
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
HPORT=$(free_port); FPORT=$(free_port); GPORT=5555
RUN=$LAB/runs/verbs-interop-$(date +%Y%m%d-%H%M%S)-$$; mkdir -p "$RUN"
"$BIN" serve --provider siw --addr "127.0.0.1:$HPORT" --duration 240 --max-size 262144 > "$RUN/host-serve.log" 2>&1 &
HSERVE=$!
trap 'kill $HSERVE $LABPID 2>/dev/null' EXIT
LAB_HOSTFWD="hostfwd=tcp:127.0.0.1:$FPORT-:$GPORT" "$HERE/run.sh" -q -t 400 -o "$RUN" \
  "$HERE/guest/verbs-interop.sh" "$BIN" "$HPORT" "$GPORT" 60 &
LABPID=$!
BAD=0
# Host -> guest once the guest serves.
for _ in $(seq 1 480); do [ -f "$RUN/guest-serving" ] && break; kill -0 $LABPID 2>/dev/null || break; sleep 0.5; done
if [ -f "$RUN/guest-serving" ]; then
  h2g() {
    local name=$1 want=$2; shift 2
    out=$(timeout 60 "$BIN" call --provider siw --addr "127.0.0.1:$FPORT" --json "$@" 2>&1)
    echo "h2g $name: $out" | head -c 600; echo
    echo "$out" | grep -q "$want" || { echo "verbs-interop: host siw call -> guest verbs serve: $name FAILED"; BAD=1; }
  }
  h2g null '"status": *"SUCCESS"' --null
  h2g echo-rw 'echoed 40001 octets match' --echo --size 40001 --read-chunk --write-chunk
else
  echo "verbs-interop: the guest never served (step: guest verbs serve)"; BAD=1
fi
wait $LABPID; RC=$?
grep -E '^==> |^g2h ' "$RUN/guest.log" 2>/dev/null
[ "$RC" = 0 ] || { echo "verbs-interop: guest run failed (run.sh exit $RC, $RUN)"; exit "$RC"; }
for name in null echo-rw; do
  if grep -q '"status": *"SUCCESS"' "$RUN/g2h-$name.json" 2>/dev/null; then :
  elif grep -q 'memory windows' "$RUN/g2h-$name.err" 2>/dev/null; then
    echo "verbs-interop: guest verbs call -> host siw serve: $name refused as known (siw0 has no type-2 memory windows, so no verbs requester)"
  else echo "verbs-interop: guest verbs call -> host siw serve: $name FAILED ($RUN/g2h-$name.*)"; BAD=1; fi
done
[ "$BAD" = 0 ] || { echo "verbs-interop: FAILED ($RUN)"; exit 1; }
echo "verbs-interop: host siw <-> guest verbs on siw0 passed ($RUN)"
