#!/usr/bin/env bash
# Profile an rpcrdma-perf run.
#
#   perf/profile.sh                          # lat with baselines, 2 s per row
#   perf/profile.sh bw --size 64k --baseline # any rpcrdma-perf arguments
#
# With hardware performance counters: `perf record -g` (frame-pointer call graphs; the
# workspace builds with frame pointers) and the report. Without them (most VMs and
# containers, checked with `perf stat -e instructions true`): `perf stat` with software
# events, then a cpu-clock sampling profile if the kernel allows it. Installs linux-perf
# with apt-get when perf is missing and we are root. Output goes to target/profile/.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=target/profile
mkdir -p "$OUT"

if ! command -v perf >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "profile.sh: installing linux-perf" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null; }
  else
    echo "profile.sh: perf is not installed; as root run: apt-get install linux-perf" >&2
    exit 1
  fi
fi

[ $# -gt 0 ] || set -- lat --baseline --duration 2s
cargo build --release -q -p rpcrdma-perf
BIN=target/release/rpcrdma-perf

report() {
  perf report -i "$1" --stdio --no-children --percent-limit 1 2>/dev/null | grep -v '^$' | head -n 120
}

if perf stat -x, -e instructions true 2>&1 | grep -q '^[0-9]'; then
  echo "== perf record -g (hardware counters available)"
  perf record -g --call-graph fp -o "$OUT/perf.data" -- "$BIN" "$@"
  report "$OUT/perf.data"
else
  echo "== no hardware counters here (perf stat -e instructions: not supported): perf stat"
  perf stat -e task-clock,context-switches,cpu-migrations,page-faults -- "$BIN" "$@"
  echo "== cpu-clock sampling profile"
  if perf record -e cpu-clock -F 2000 --call-graph fp -o "$OUT/perf.data" -- "$BIN" "$@" >/dev/null 2>"$OUT/record.err"; then
    report "$OUT/perf.data"
  else
    echo "profile.sh: cpu-clock sampling is not permitted here ($(tail -n 1 "$OUT/record.err"))" >&2
  fi
fi
