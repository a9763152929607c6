#!/bin/bash
# The guest kernel's NFSv3 client over RDMA (siw0) mounting the HOST's
# `rpcrdma serve --nfs --provider siw` through 10.0.2.2 (qemu user networking forwards it
# to the host's 127.0.0.1): MOUNT over TCP, NFS over our userspace iWARP. The guest writes
# 32 MiB with fsync, drops caches, reads back and compares, creates 200 files and counts
# them, makes a symlink; then the guest kernel's NFSv4.1 client mounts the same server,
# reads the blob back, counts the files and creates one; the host then compares the served directory with what the guest
# wrote and checks the server's stop lines for Write, Read and Reply chunks.
# Host-side traffic lands in RUN/host.pcap when tshark is present, and must decode there
# as NFS over RPC-over-RDMA over iWARP (tshark -r host.pcap -Y rpcordma).
# exit: 0 pass, 1 failed (named), 2-4 as run.sh, 5 host build failed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"
cd "$ROOT" || exit 4
cargo build -q -p rpcrdma-tools --features verbs 2>"$LAB/nfs-host-siw-build.log" ||
  { tail -n 30 "$LAB/nfs-host-siw-build.log"; echo "nfs-host-siw: host build failed"; exit 5; }
BIN=$ROOT/target/debug/rpcrdma
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
HPORT=$(free_port); MPORT=$(free_port)
RUN=$LAB/runs/nfs-host-siw-$(date +%Y%m%d-%H%M%S)-$$; mkdir -p "$RUN/export"
CAP=
if command -v tshark >/dev/null; then
  tshark -i lo -q -F pcap -w "$RUN/host.pcap" -f "tcp port $HPORT or tcp port $MPORT" \
    > "$RUN/tshark.log" 2>&1 &
  CAP=$!
  for _ in $(seq 1 50); do [ -s "$RUN/host.pcap" ] && break; sleep 0.2; done
fi
"$BIN" serve --provider siw --addr "127.0.0.1:$HPORT" --nfs "$RUN/export" --mount-port "$MPORT" \
  --duration 600 > "$RUN/host-serve.log" 2>&1 &
HSERVE=$!
trap 'kill $HSERVE $CAP 2>/dev/null' EXIT
for _ in $(seq 1 100); do grep -q 'MOUNT v3 on tcp' "$RUN/host-serve.log" && break; sleep 0.1; done
grep 'MOUNT v3 on tcp' "$RUN/host-serve.log" || { cat "$RUN/host-serve.log"; echo "nfs-host-siw: server did not start"; exit 1; }
"$HERE/run.sh" -q -t 500 -o "$RUN" "$HERE/guest/nfs-host.sh" "$HPORT" "$MPORT"; rc=$?
kill -INT $HSERVE; wait $HSERVE
[ -n "$CAP" ] && { sleep 0.5; kill -INT "$CAP" 2>/dev/null; wait "$CAP" 2>/dev/null; }
grep 'rpcrdma serve: nfs:' "$RUN/host-serve.log"
[ "$rc" = 0 ] || { echo "nfs-host-siw: guest failed (exit $rc); log $RUN/guest.log"; tail -n 40 "$RUN/guest.log"; exit "$rc"; }
BAD=()
cmp -s "$RUN/blob" "$RUN/export/blob" || BAD+=("the served blob differs from what the guest wrote")
n=$(find "$RUN/export/many" -type f | wc -l); [ "$n" = 200 ] || BAD+=("$n files on the host, not 200")
[ "$(readlink "$RUN/export/link")" = /etc/passwd ] || BAD+=("symlink target not stored verbatim")
[ "$(cat "$RUN/export/v41.txt" 2>/dev/null)" = hello-over-v41 ] || BAD+=("v41.txt not written through the NFSv4.1 mount")
grep -q 'NFS4 COMPOUND [1-9]' "$RUN/host-serve.log" || BAD+=("no NFSv4.1 COMPOUND on the server's stop lines")
used() { local n; n=$(sed -n "s/.*nfs: NFS3 $1 [0-9]* calls .*$2 \([0-9]*\).*/\1/p" "$RUN/host-serve.log" | head -n1); echo "${n:-0}"; }
[ "$(used READ write)" -gt 0 ] || BAD+=("no Write chunks used by READ")
[ "$(used WRITE read)" -gt 0 ] || BAD+=("no Read chunks used by WRITE")
[ $(( $(used READDIRPLUS reply) + $(used READDIR reply) )) -gt 0 ] || BAD+=("no Reply chunks used by READDIR/READDIRPLUS")
if [ -s "$RUN/host.pcap" ] && command -v tshark >/dev/null; then
  # Wireshark finds MPA heuristically from its handshake, then RPC-over-RDMA and NFS.
  tshark -r "$RUN/host.pcap" -Y rpcordma 2>/dev/null > "$RUN/host-decoded.txt"
  frames=$(wc -l < "$RUN/host-decoded.txt")
  echo "nfs-host-siw: tshark decodes $frames RPC-over-RDMA frames in $RUN/host.pcap, e.g.:"
  grep -m1 'V3 READ Call' "$RUN/host-decoded.txt"
  grep -m1 'V3 WRITE Call' "$RUN/host-decoded.txt"
  grep -q 'V3 READ Reply' "$RUN/host-decoded.txt" || BAD+=("tshark decoded no NFS READ reply")
fi
if [ "${#BAD[@]}" -gt 0 ]; then printf 'nfs-host-siw: FAILED: %s\n' "${BAD[@]}"; exit 1; fi
rm -f "$RUN/blob" "$RUN/export/blob"
echo "nfs-host-siw: PASS (run dir $RUN)"
