# guest: several guest scripts one after another in ONE boot (a boot plus module loads
# costs 12-15 s under TCG; ci.sh runs its in-guest NFS scripts this way). Each script
# runs as `bash SCRIPT [ARG]` under its own timeout, with $LAB_OUT pointing at
# /out/NAME (NAME: the script's name without .sh); its output goes to this boot's log
# and to /out/NAME/guest.log, its exit status to /out/NAME/rc and its duration to
# /out/NAME/secs. Between two scripts the guest is put back to how it booted (reset
# below: leftover processes, NFS mounts, nfsd, rpcbind/mountd, tmpfs exports, RDMA
# links), so no script sees what the one before it left. A failing script does not stop
# the later ones; this script fails when any of them did, naming each.
#   usage: seq.sh SPEC...   SPEC: SCRIPT:TIMEOUT[:ARG]  (SCRIPT relative to this directory)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${LAB_OUT:-/tmp}
[ $# -gt 0 ] || { echo "usage: seq.sh SCRIPT:TIMEOUT[:ARG]..."; exit 2; }

# reset: undoes what the NFS and verbs guest scripts set up, in dependency order (the
# kernel clients' mounts hold connections to the servers; nfsd holds its exports; RDMA
# links cannot go while a connection uses them). Prints what it had to clean; exit 1
# when the guest could not be put back (the next script then runs anyway and says how
# it fails).
reset() {
  local pid m t bad=0 mounts
  # (No process substitution: the guest has no /dev/fd.)
  # Daemons the scripts start detach from the script's process group.
  for pid in $(pidof rpcbind rpc.mountd rpc.statd rpc.idmapd 2>/dev/null); do
    echo "seq reset: stopping $(tr -d '\0' < "/proc/$pid/comm" 2>/dev/null) ($pid)"
    kill "$pid" 2>/dev/null
  done
  mounts=$(tac /proc/mounts)
  while read -r _ m t _; do
    case $t in nfs|nfs4) echo "seq reset: unmounting $m"; umount -f "$m" 2>/dev/null || umount -l "$m" ;; esac
  done <<< "$mounts"
  if grep -q ' /proc/fs/nfsd ' /proc/mounts; then
    rpc.nfsd 0 2>/dev/null
    exportfs -au 2>/dev/null
    umount /proc/fs/nfsd || { echo "seq reset: cannot unmount /proc/fs/nfsd"; bad=1; }
  fi
  if grep -q ' /var/lib/nfs/rpc_pipefs ' /proc/mounts; then
    umount /var/lib/nfs/rpc_pipefs 2>/dev/null || umount -l /var/lib/nfs/rpc_pipefs
  fi
  # tmpfs exports, bind mounts and mount points the scripts made (deepest first).
  mounts=$(tac /proc/mounts)
  while read -r _ m _ _; do
    case $m in /export*|/v4root*|/mnt/*)
      umount "$m" 2>/dev/null || { umount -l "$m" 2>/dev/null || { echo "seq reset: cannot unmount $m"; bad=1; }; } ;;
    esac
  done <<< "$mounts"
  rm -f /etc/exports
  for l in $(rdma link show 2>/dev/null | awk '{print $2}'); do
    rdma link delete "${l%/*}" || { echo "seq reset: cannot delete RDMA link ${l%/*}"; bad=1; }
  done
  return "$bad"
}

FAILED=()
for spec in "$@"; do
  IFS=: read -r script timeout arg <<< "$spec"
  name=${script%.sh}
  mkdir -p "$OUT/$name"
  echo "==> [$(cut -d' ' -f1 /proc/uptime)s] seq: $name (timeout ${timeout}s)"
  t0=$SECONDS
  args=(); [ -n "$arg" ] && args=("$arg")
  # The scripts stop their background servers on exit (common.sh); on a timeout,
  # timeout(1) signals the script's whole process group.
  LAB_OUT=$OUT/$name timeout -k 10 "$timeout" bash "$HERE/$script" "${args[@]}" </dev/null 2>&1 |
    tee "$OUT/$name/guest.log"
  rc=${PIPESTATUS[0]}
  echo "$rc" > "$OUT/$name/rc"
  echo "$((SECONDS - t0))" > "$OUT/$name/secs"
  [ "$rc" = 124 ] && echo "GUEST FAIL: $name timed out after ${timeout}s"
  echo "==> [$(cut -d' ' -f1 /proc/uptime)s] seq: $name exited $rc after $((SECONDS - t0))s"
  [ "$rc" = 0 ] || FAILED+=("$name")
  reset || echo "seq: the guest could not be fully reset after $name"
done
[ ${#FAILED[@]} = 0 ] || { echo "GUEST FAIL: seq: failed: ${FAILED[*]}"; exit 1; }
echo "SEQ_OK $*"
