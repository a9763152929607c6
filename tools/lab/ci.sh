#!/bin/bash
# What .ci/run calls: lab setup (idempotent) and the lab's checks, each step named, timed,
# and reported by name when it fails. Needs root on Debian 12 (setup installs packages).
#
# Steps: setup, build-debug (the host binaries every step shares; compiles nothing after
# CI's test stage), build-release (started in the background, niced, while the steps that
# need no release binary run; waited for before the first that does), selftest
# (host-built binary inside the guest, status plumbing), smoke (rxe0 + siw0: ibv_devices,
# rping, ib_send_lat), mpa (host TCP -> guest siw MPA Request/Reply), siw-interop,
# nfs-host-siw, nfs-host-client, verbs, verbs-interop, then the in-guest NFS scripts in
# one boot (guest/seq.sh), each still its own step with its own time and result: nfs
# (kernel NFSv3/v4.2 over RDMA on siw0 and rxe0), nfs-ours, nfs-ours41 (the kernel NFSv3
# and NFSv4.1 clients against our `rpcrdma serve --nfs`), nfs-client (`rpcrdma nfs`
# against kernel nfsd), nfs-compare (kernel nfsd beside ours, release build).
# LAB_NFS=0 skips every NFS step (said so in the step list).
# env: LAB, LAB_CI_BUDGET (seconds, default 900: printed, and exceeded is reported loudly),
#      LAB_VERBOSE=1 streams the guest consoles.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
export LAB
BUDGET=${LAB_CI_BUDGET:-900}
QOPT=(-q); [ -n "${LAB_VERBOSE:-}" ] && QOPT=()
FAILED=() TIMES=()
SECONDS=0

# run_step NAME CMD...: runs one step and records its outcome and duration.
run_step() {
  local name=$1 t0=$SECONDS rc; shift
  printf '\n---- lab step: %s\n' "$name"
  "$@"; rc=$?
  TIMES+=("$name=$((SECONDS - t0))s")
  if [ "$rc" = 0 ]; then
    echo "---- lab step $name: ok in $((SECONDS - t0))s"
  else
    echo "---- lab step $name: FAILED (exit $rc) after $((SECONDS - t0))s"
    FAILED+=("$name")
  fi
  return "$rc"
}

# shellcheck disable=SC2317  # called through run_step
# guest_step NAME SCRIPT TIMEOUT: one run.sh boot; shows the script's step markers and
# metrics on success and its whole log on failure.
guest_step() {
  local name=$1 script=$2 timeout=$3 run rc
  run=$LAB/runs/ci-$name-$(date +%Y%m%d-%H%M%S)-$$
  "$HERE/run.sh" "${QOPT[@]}" -t "$timeout" -o "$run" "$HERE/guest/$script"; rc=$?
  if [ "$rc" = 0 ]; then
    grep -E '^==> |LAB_METRIC' "$run/guest.log"
  elif [ -f "$run/guest.log" ]; then
    echo "---- guest log of $name ($run/guest.log), last 80 lines:"; tail -n 80 "$run/guest.log"
  fi
  return "$rc"
}

finish() {
  echo
  echo "---- lab step times: ${TIMES[*]}"
  echo "---- lab total ${SECONDS}s (budget ${BUDGET}s)"
  [ "$SECONDS" -le "$BUDGET" ] || echo "---- lab WARNING: over the ${BUDGET}s budget"
  if [ "${#FAILED[@]}" -gt 0 ]; then echo "---- lab FAILED steps: ${FAILED[*]}"; exit 1; fi
  echo "---- lab all steps passed"
  exit 0
}

run_step setup "$HERE/setup.sh" || finish
# Run directories are for post-mortems; a week is plenty.
find "$LAB/runs" -mindepth 1 -maxdepth 1 -mtime +7 -exec rm -rf {} + 2>/dev/null
# Every step's host binaries, built here once (lib.sh) and exported to the steps. The
# guest reads them live, so nothing may rebuild them while a guest runs.
# shellcheck disable=SC2317  # called through run_step
build_debug() { lab_build_debug && echo "build-debug: $LAB_BIN $LAB_RPING $LAB_VERBS_TEST"; }
run_step build-debug build_debug || finish
# The release binaries (nfs-compare's server, the verbs steps' rpcrdma-perf) build in the
# background under nice while the steps that do not need them run; target/release is
# nothing those steps' guests read. Its outcome and duration come back through a file.
REL_ENV=$(mktemp "${TMPDIR:-/tmp}/lab-release.XXXXXX")
REL_T0=$SECONDS
# set -m: the build gets a process group of its own, so a lab run that ends early stops
# cargo and its compilers with it.
set -m
( renice -n 15 -p "$BASHPID" >/dev/null 2>&1
  if lab_build_release; then
    printf 'LAB_BIN_REL=%q\nLAB_PERF_REL=%q\n' "$LAB_BIN_REL" "$LAB_PERF_REL"
  fi > "$REL_ENV.tmp"; echo "REL_SECS=$((SECONDS - REL_T0))" >> "$REL_ENV.tmp"; mv "$REL_ENV.tmp" "$REL_ENV"
) > "$LAB/build-release.out" 2>&1 < /dev/null &
REL_PID=$!
set +m
trap 'kill -- -"$REL_PID" 2>/dev/null; rm -f "$REL_ENV" "$REL_ENV.tmp"' EXIT
# shellcheck disable=SC2317  # called through run_step
build_release() {
  wait "$REL_PID"
  # shellcheck disable=SC1090
  . "$REL_ENV"
  echo "build-release: finished ${REL_SECS:-?}s after it started in the background: ${LAB_BIN_REL:-} ${LAB_PERF_REL:-}"
  if [ -z "${LAB_BIN_REL:-}" ] || [ -z "${LAB_PERF_REL:-}" ]; then
    cat "$LAB/build-release.out"; unset LAB_BIN_REL LAB_PERF_REL; return 5
  fi
  export LAB_BIN_REL LAB_PERF_REL
}

# A guest that cannot boot fails every later step the same way; stop at the first one.
run_step selftest "$HERE/selftest.sh"; [ $? = 2 ] && finish
run_step smoke guest_step smoke smoke.sh 600; [ $? = 2 ] && finish
run_step mpa "$HERE/mpa-check.sh"; [ $? = 2 ] && finish
run_step siw-interop "$HERE/siw-interop.sh"; [ $? = 2 ] && finish
# The guest kernel's NFSv3 client on siw0 against the host's `rpcrdma serve --nfs --provider
# siw` through 10.0.2.2; the capture must decode as NFS in tshark.
[ "${LAB_NFS:-1}" = 0 ] || { run_step nfs-host-siw "$HERE/nfs-host-siw.sh"; [ $? = 2 ] && finish; }
# The host's `rpcrdma nfs --provider siw --siw-no-confirm` (NFSv4.1 and NFSv3) against
# the guest's kernel nfsd through hostfwds: ls, get and put compared octet by octet,
# NOENT named (its pipelined bench stays opt-in: see the script's header).
[ "${LAB_NFS:-1}" = 0 ] || { run_step nfs-host-client "$HERE/nfs-host-client.sh"; [ $? = 2 ] && finish; }
# From here on the steps need the release build.
run_step build-release build_release
run_step verbs "$HERE/verbs.sh"; [ $? = 2 ] && finish
# Host userspace siw <-> guest verbs on siw0 through the CLI, both directions, every chunk
# type; a failure names each direction-case (h2g-echo-write, g2h-long-reply, ...).
run_step verbs-interop "$HERE/verbs-interop.sh"; [ $? = 2 ] && finish

# The in-guest NFS scripts, one boot for all (guest/seq.sh resets the guest between them),
# each reported as a step of its own with its time and result:
#   nfs          kernel NFSv3/v4.2 client against kernel nfsd over RDMA
#   nfs-ours     the kernel NFSv3 client against our `rpcrdma serve --nfs`
#   nfs-ours41   the kernel NFSv4.1 client against ours (backchannel, delegation recall)
#   nfs-client   our `rpcrdma nfs` (NFSv3, NFSv4.1) against kernel nfsd
#   nfs-compare  kernel client workloads (dd, fio) and `rpcrdma nfs bench` against kernel
#                nfsd and ours (release build) on siw0: ratios as LAB_METRIC lines
#                (reported, not asserted)
# Each on siw0 and rxe0 unless said otherwise.
# shellcheck disable=SC2317  # called through run_step
nfs_guest() {
  local specs=(nfs-rdma.sh:900 "nfs-ours.sh:900:$LAB_BIN" "nfs-ours41.sh:900:$LAB_BIN"
               "nfs-client.sh:900:$LAB_BIN") names=(nfs nfs-ours nfs-ours41 nfs-client)
  local run total=120 spec name sub rc=0 srs i
  if [ -n "${LAB_BIN_REL:-}" ]; then
    specs+=("nfs-compare.sh:900:$LAB_BIN_REL"); names+=(nfs-compare)
  else
    echo "---- lab step nfs-compare: FAILED (no release build to run; see build-release)"
    FAILED+=(nfs-compare); TIMES+=("nfs-compare=0s")
  fi
  for spec in "${specs[@]}"; do IFS=: read -r _ sub _ <<<"$spec"; total=$((total + sub)); done
  run=$LAB/runs/ci-nfs-guest-$(date +%Y%m%d-%H%M%S)-$$
  "$HERE/run.sh" "${QOPT[@]}" -t "$total" -o "$run" "$HERE/guest/seq.sh" "${specs[@]}"; rc=$?
  grep -aE '^==> |LAB_METRIC' "$run/guest.log" 2>/dev/null
  for i in "${!specs[@]}"; do
    sub=${specs[$i]%%.sh:*}; name=${names[$i]}
    srs=$(cat "$run/$sub/secs" 2>/dev/null || echo 0)
    TIMES+=("$name=${srs}s")
    if [ "$(cat "$run/$sub/rc" 2>/dev/null)" = 0 ]; then
      echo "---- lab step $name: ok in ${srs}s (in the nfs-guest boot)"
    else
      echo "---- lab step $name: FAILED (exit $(cat "$run/$sub/rc" 2>/dev/null || echo "none: never finished")) after ${srs}s (in the nfs-guest boot; log $run/$sub/guest.log), last 80 lines:"
      tail -n 80 "$run/$sub/guest.log" 2>/dev/null
      FAILED+=("$name")
    fi
  done
  # The boot's own verdict (a failed reset, a boot or timeout failure) counts too.
  [ "$rc" = 0 ] || tail -n 40 "$run/console.log" 2>/dev/null
  return "$rc"
}
if [ "${LAB_NFS:-1}" = 0 ]; then
  echo "---- lab: LAB_NFS=0: skipping nfs-host-siw, nfs-host-client, nfs, nfs-ours, nfs-ours41, nfs-client, nfs-compare"
else
  run_step nfs-guest nfs_guest
fi
finish
