#!/usr/bin/env bash
# System calls per operation of the RPC rows, counted with strace on both threads (the
# measuring requester and the busy-polling responder): each row runs twice, with N and
# 2N operations after the same 200-operation warm-up, and the difference is divided by
# N, so set-up and tear-down cancel out. What remains is what the steady state costs per
# round trip (lat) or per operation of SIZE octets (bw: per MiB at 1m), idle polling
# included: a system call a poller makes every k polls shows up in proportion to the
# polls each operation takes.
#
# usage: perf/syscalls.sh [N]        # default N=2000; release build of rpcrdma-perf
#        RPCRDMA_PERF=/path/to/rpcrdma-perf perf/syscalls.sh [N]   # another build, as is
# prints: row, calls per operation in total and those that moved data (sends, and
# receives that returned data), and the calls that make it up (>= 0.01 per op)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v strace >/dev/null || { echo "perf/syscalls.sh: strace is missing (apt-get install strace)"; exit 1; }
N=${1:-2000}
if [ -n "${RPCRDMA_PERF:-}" ]; then
  bin=$RPCRDMA_PERF
else
  cargo build -q --release -p rpcrdma-perf
  bin=target/release/rpcrdma-perf
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Runs `rpcrdma-perf ARGS --iters $2` under strace -f -c; prints "name calls" per line.
counts() {
  local iters=$1; shift
  strace -f -c -S name -o "$out/trace" "$bin" "$@" --warmup 200 --iters "$iters" >/dev/null 2>&1
  # Columns: % time, seconds, usecs/call, calls, [errors,] syscall.
  awk '$4 ~ /^[0-9]+$/ && $NF != "total" {e = (NF == 6) ? $5 : 0; print $NF, $4, e}' "$out/trace"
}

# row LABEL ROWS ARGS...: ROWS is how many RPC rows ARGS runs (each runs the --iters).
row() {
  local label=$1 rows=$2; shift 2
  counts "$N" "$@" > "$out/a"
  counts $((2 * N)) "$@" > "$out/b"
  python3 - "$out/a" "$out/b" "$((N * rows))" "$label" <<'PY'
import sys
def load(p):
    d = {}
    for line in open(p):
        name, n, e = line.split()
        c, f = d.get(name, (0, 0))
        d[name] = (c + int(n), f + int(e))
    return d
a, b, n, label = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
per = {}
for k in set(a) | set(b):
    (ca, ea), (cb, eb) = a.get(k, (0, 0)), b.get(k, (0, 0))
    per[k] = ((cb - ca) / n, (eb - ea) / n)
total = sum(c for c, _ in per.values())
# Calls that moved data (sends, and receives that returned some), as opposed to polls
# that found nothing (epoll_wait, EAGAIN) and bookkeeping.
MOVERS = {"sendmsg", "sendto", "send", "write", "writev", "recvfrom", "recvmsg", "read", "readv"}
moved = sum(c - e for k, (c, e) in per.items() if k in MOVERS)
def part(k, c, e):
    return f"{k} {c:.2f}" + (f" ({e:.2f} EAGAIN/err)" if e >= 0.01 else "")
parts = ", ".join(part(k, c, e) for k, (c, e) in sorted(per.items(), key=lambda kv: -kv[1][0]) if c >= 0.01)
print(f"{label:<42} {total:7.2f} per op, {moved:6.2f} moving data   ({parts})")
PY
}

echo "system calls per operation (strace -f -c, difference of ${N} and $((2 * N)) operations)"
[ -n "${SIW_ONLY:-}" ] || row "shm lat echo 64 B (per RTT)" 1 lat --provider shm --size 64
row "siw lat echo 64 B (per RTT)" 1 lat --provider siw --size 64
# At 4 KiB the lat run has seven RPC rows (echo, long calls, bulk arguments and results): the mean per round trip.
row "siw lat 4 KiB, 7 RPC rows (per RTT)" 7 lat --provider siw --size 4k
# siw-only as well: SIW_ONLY keeps it.
row "siw bw read+write chunk 1 MiB (per MiB)" 2 bw --provider siw --size 1m --depth 2
