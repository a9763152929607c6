#!/bin/bash
# Host siw provider <-> guest verbs provider on the kernel's siw0, through the CLI, in one
# boot: host `rpcrdma serve --provider siw` called by the guest's `rpcrdma call --provider
# verbs` (at 10.0.2.2), and the guest's `rpcrdma serve --provider verbs` called by the
# host's `rpcrdma call --provider siw` through a qemu hostfwd. Each direction runs the
# same cases (CASES below): NULL, inline ECHO, ECHO with a Read chunk, with a Write chunk,
# with a Reply chunk, and with both Read and Write chunks; every echo is checked octet by
# octet by the CLI ("echoed N octets match"). Then the two-host benchmark: the host's
# `rpcrdma-perf lat` and `rate --connect` (siw) against the guest's server (verbs on
# siw0), each reported as a LAB_METRIC two_host_* line and failed when no row measures.
# Host-side traffic of both directions lands in RUN/host.pcap when tshark is present
# (decode: tshark -r host.pcap -d tcp.port==PORT,iwarp_mpa).
# exit: 0 pass, 1 a direction/case failed (named), 2-4 as run.sh, 5 host build failed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"
cd "$ROOT" || exit 4
cargo build -q -p rpcrdma-tools --features verbs 2>"$LAB/verbs-interop-build.log" ||
  { tail -n 30 "$LAB/verbs-interop-build.log"; echo "verbs-interop: host build failed"; exit 5; }
# The two-host benchmark's client (release: CI built it already for the main job).
cargo build -q --release -p rpcrdma-perf 2>>"$LAB/verbs-interop-build.log" ||
  { tail -n 30 "$LAB/verbs-interop-build.log"; echo "verbs-interop: host perf build failed"; exit 5; }
BIN=$ROOT/target/debug/rpcrdma
PERF=$ROOT/target/release/rpcrdma-perf
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
HPORT=$(free_port); FPORT=$(free_port); GPORT=5555
RUN=$LAB/runs/verbs-interop-$(date +%Y%m%d-%H%M%S)-$$; mkdir -p "$RUN"
# name|expected check|expected call shape|call arguments; the guest script reads the same
# file. The shape (what the call put on the wire) proves each chunk type was exercised;
# --inline 8192 against the server's 4096 makes an inline-sized call a long one
# (RDMA_NOMSG: the whole message in a Position-Zero Read chunk; --no-extensions keeps it
# version 1, since two rpcrdma peers would send it as a continuation group). The last
# case is that group: a 20 KB ECHO as five Sends each way (the round-trip draft's
# message continuation, negotiated between the two rpcrdma peers), no chunk.
cat > "$RUN/cases" <<'CASES'
null|"status":"SUCCESS"|"call":"RDMA_MSG","read_chunks":0,"write_chunks":0,"reply_chunks":0|--null
echo-inline|echoed 1000 octets match|"call":"RDMA_MSG","read_chunks":0,"write_chunks":0,"reply_chunks":0|--echo --size 1000
echo-read|echoed 2000 octets match|"call":"RDMA_MSG","read_chunks":1,"write_chunks":0,"reply_chunks":0|--echo --size 2000 --read-chunk --send-ddp-max 0
echo-write|echoed 3000 octets match|"call":"RDMA_MSG","read_chunks":0,"write_chunks":1,"reply_chunks":0|--echo --size 3000 --write-chunk
echo-reply|echoed 6000 octets match|"call":"RDMA_MSG","read_chunks":1,"write_chunks":0,"reply_chunks":1|--echo --size 6000 --reply-chunk --no-extensions
echo-rw|echoed 40001 octets match|"call":"RDMA_MSG","read_chunks":1,"write_chunks":1,"reply_chunks":0|--echo --size 40001 --read-chunk --write-chunk
long-reply|echoed 6000 octets match|"call":"RDMA_NOMSG","read_chunks":1,"write_chunks":0,"reply_chunks":1|--echo --size 6000 --inline 8192 --reply-chunk --no-extensions
long-write|echoed 6000 octets match|"call":"RDMA_NOMSG","read_chunks":1,"write_chunks":1,"reply_chunks":0|--echo --size 6000 --inline 8192 --write-chunk --no-extensions
continuation|echoed 20000 octets match|"call":"ROPT_XMTREQ","read_chunks":0,"write_chunks":0,"reply_chunks":0,"reply_read_chunks":0,"done_sent":false,"call_messages":5,"reply_messages":5|--echo --size 20000
CASES
CAP=
if command -v tshark >/dev/null; then
  tshark -i lo -q -F pcap -w "$RUN/host.pcap" -f "tcp port $FPORT or tcp port $HPORT" \
    > "$RUN/tshark.log" 2>&1 &
  CAP=$!
  for _ in $(seq 1 50); do [ -s "$RUN/host.pcap" ] && break; sleep 0.2; done
fi
"$BIN" serve --provider siw --addr "127.0.0.1:$HPORT" --duration 300 --max-size 262144 > "$RUN/host-serve.log" 2>&1 &
HSERVE=$!
LABPID=
trap 'kill $HSERVE $LABPID $CAP 2>/dev/null' EXIT
LAB_HOSTFWD="hostfwd=tcp:127.0.0.1:$FPORT-:$GPORT" "$HERE/run.sh" -q -t 400 -o "$RUN" \
  "$HERE/guest/verbs-interop.sh" "$BIN" "$HPORT" "$GPORT" 90 &
LABPID=$!
BAD=()
# Host -> guest once the guest serves.
for _ in $(seq 1 600); do [ -f "$RUN/guest-serving" ] && break; kill -0 $LABPID 2>/dev/null || break; sleep 0.5; done
if [ -f "$RUN/guest-serving" ]; then
  while IFS='|' read -r name _ _ args; do
    # shellcheck disable=SC2086  # args is a word list
    timeout 60 "$BIN" call --provider siw --addr "127.0.0.1:$FPORT" --json --timeout 10 $args \
      > "$RUN/h2g-$name.json" 2> "$RUN/h2g-$name.err"
  done < "$RUN/cases"
  # The two-host benchmark, perftest-style: this host's rpcrdma-perf (userspace siw)
  # against the guest's server (verbs on the kernel's siw0), RPC rows only. Under TCG
  # the figures say that the split works across two kernels, not what hardware does.
  for mode in lat rate; do
    depth=(); [ "$mode" = rate ] && depth=(--depth 4)
    timeout 120 "$PERF" "$mode" --provider siw --connect "127.0.0.1:$FPORT" --size 64 \
      --iters 300 --warmup 30 "${depth[@]}" --credits 32 --json \
      > "$RUN/h2g-perf-$mode.json" 2> "$RUN/h2g-perf-$mode.err"
    echo "h2g perf $mode rc=$?" >> "$RUN/h2g-perf.rc"
  done
  touch "$RUN/host-done"
else
  echo "verbs-interop: the guest never served (step: guest verbs serve)"; BAD+=(guest-serve)
fi
wait $LABPID; RC=$?
LABPID=
grep -E '^==> ' "$RUN/guest.log" 2>/dev/null
[ "$RC" = 0 ] || { echo "verbs-interop: guest run failed (run.sh exit $RC, $RUN)"; exit "$RC"; }
# judge DIR: each case's reply check and call shape, from RUN/DIR-NAME.json (spaces and
# line breaks removed, so the fragments above match the pretty-printed JSON).
judge() {
  local dir=$1 name want shape flat
  while IFS='|' read -r name want shape _; do
    flat=$(tr -d ' \n' < "$RUN/$dir-$name.json" 2>/dev/null)
    if [[ $flat == *"${want// /}"* && $flat == *"$shape"* ]]; then echo "$dir $name: ok"
    else
      echo "$dir $name: FAILED: ${flat:0:500} $(head -c 300 "$RUN/$dir-$name.err" 2>/dev/null)"
      BAD+=("$dir-$name")
    fi
  done < "$RUN/cases"
}
[ -f "$RUN/host-done" ] && judge h2g
judge g2h
# perf_row MODE: the benchmark's one RPC row, measured without error, as a LAB_METRIC line.
perf_row() {
  python3 - "$RUN/h2g-perf-$1.json" "$1" <<'PY'
import json, sys
path, mode = sys.argv[1], sys.argv[2]
try:
    rows = json.load(open(path))["rows"]
except (OSError, ValueError, KeyError) as e:
    sys.exit(f"no JSON rows ({e})")
ok = [r for r in rows if r.get("layer") == "rpc" and not r.get("error") and r.get("figures")]
if not ok:
    sys.exit(f"no measured rpc row: {rows}")
f = ok[0]["figures"]
print(f"LAB_METRIC two_host_{mode} host_siw_to_guest_verbs size=64 p50_us={f['p50_ns'] / 1e3:.1f} "
      f"p99_us={f['p99_ns'] / 1e3:.1f} ops_per_s={f['ops_per_s']:.0f} ops={f['ops']}")
PY
}
if [ -f "$RUN/host-done" ]; then
  for mode in lat rate; do
    if ! perf_row "$mode"; then
      echo "h2g perf-$mode: FAILED: $(head -c 500 "$RUN/h2g-perf-$mode.err" 2>/dev/null)"
      BAD+=("h2g-perf-$mode")
    fi
  done
fi
# terminates: every Terminate in RUN/host.pcap, with its control word read both the RFC 5040
# way (layer in the high nibble) and the way Linux siw writes it on little-endian hosts
# (its bitfields put the layer in the low nibble), and the offending segment's header.
terminates() {
  [ -n "$CAP" ] && [ -s "$RUN/host.pcap" ] || return 0
  kill "$CAP" 2>/dev/null; wait "$CAP" 2>/dev/null; CAP=
  tshark -r "$RUN/host.pcap" -Y 'tcp.len>0' -T fields -e tcp.stream -e tcp.srcport \
    -e tcp.dstport -e tcp.payload 2>/dev/null | python3 -c '
import sys
streams = {}
for line in sys.stdin:
    f = line.split()
    if len(f) == 4:
        streams.setdefault((f[0], f[1], f[2]), bytearray()).extend(bytes.fromhex(f[3]))
for (st, sp, dp), b in sorted(streams.items()):
    if not b.startswith(b"MPA ID R") or len(b) < 20:
        continue
    crc = 4 if b[16] & 0x40 else 0
    i = 20 + int.from_bytes(b[18:20], "big")
    while i + 4 <= len(b):
        ulpdu = int.from_bytes(b[i:i + 2], "big")
        if b[i + 3] & 0x0F == 7:
            t = b[i + 20:i + 24]
            if len(t) == 4:
                print(f"  Terminate stream {st} port {sp}->{dp}: control {t.hex()}; RFC reading"
                      f" layer {t[0] >> 4} type {t[0] & 15} code {t[1]:#04x}; Linux siw (LE)"
                      f" reading layer {t[0] & 15} type {t[0] >> 4} code {t[1]:#04x};"
                      f" offending segment length+DDP header {b[i + 24:i + 44].hex()}")
        i += (2 + ulpdu + 3) // 4 * 4 + crc
'
}
if [ "${#BAD[@]}" != 0 ]; then
  terminates
  echo "verbs-interop: FAILED: ${BAD[*]} ($RUN)"; exit 1
fi
echo "verbs-interop: host siw <-> guest verbs on siw0 passed ($RUN)"
