# guest: the kernel's NFSv4.1 client over RDMA against OUR server (`rpcrdma serve --nfs`
# on the verbs provider), on siw0 and then rxe0, each alone on eth0 (NFS4_DEVS picks
# others, e.g. "siw0"). No MOUNT protocol: the export is the root of our NFSv4 namespace. Workload: 32
# MiB written with fsync, caches dropped, read back and compared; 300 files created in
# one directory and counted with ls -l; rename, remove, symlink/readlink, chmod and stat.
# The server's stop lines must show Write chunks (READ), Read chunks (COMPOUNDs with
# WRITE data) and Reply chunks (COMPOUNDs with READDIR pages), and the backchannel (RFC
# 8167 over RDMA): the CB_NULL our server sends after CREATE_SESSION, answered by the
# kernel client; and a delegation recall: the kernel client holds a file open for
# reading (with the read delegation our server gives it), our own NFSv4.1 client
# (`rpcrdma nfs --vers 4.1 put`, a second client id) opens it for writing, our server
# answers that OPEN NFS4ERR_DELAY and sends CB_RECALL over the kernel client's
# backchannel, the kernel client returns the delegation (DELEGRETURN) and the put goes
# through: the stop line must show CB_RECALL sent and answered and the delegation
# returned, none revoked.
#   usage: nfs-ours41.sh [RPCRDMA_BIN]   (default: target/debug/rpcrdma of this checkout,
#   built with --features verbs)
set -uo pipefail
. "$(dirname "$0")/common.sh"
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
BIN=${1:-$ROOT/target/debug/rpcrdma}
IP=$LAB_GUEST_IP
MB=${NFS_MB:-32}
[ -x "$BIN" ] || fail "rpcrdma binary $BIN missing (cargo build -p rpcrdma-tools --features verbs)"

ours_setup "$MB"

# counter LOG REGEX: the first number captured by REGEX (sed) in the stop lines, or 0.
counter() {
  local n
  n=$(sed -n "s/$2/\1/p" "$1" | head -n1)
  echo "${n:-0}"
}

ours41_over() {
  local dev=$1 log=$LAB_OUT/serve41-$1.log spid t0 n
  step "rpcrdma serve --nfs on $dev ($IP:20049)"
  RPCRDMA_VERBS_DEV=$dev "$BIN" serve --provider verbs --addr "$IP:20049" --nfs /export-ours \
    --mount-port 20048 --duration 900 > "$log" 2>&1 &
  spid=$!
  wait_for 30 "our RDMA listener on $dev" cm_listening "$dev" 20049
  grep 'NFSv4.1' "$log"

  step "kernel NFSv4.1 mount over RDMA on $dev"
  timeout 120 mount -t nfs -o vers=4.1,proto=rdma,port=20049 \
    "$IP:/" /mnt/ours || { cat "$log"; dmesg | tail -n 30; fail "NFSv4.1 rdma mount of our server on $dev"; }
  grep -E 'nfs4|vers=4.1' /proc/mounts | grep -q /mnt/ours || fail "not an NFSv4.1 mount"
  grep -qE 'xprt:[[:space:]]+rdma' /proc/self/mountstats || fail "mount is not using rdma"
  grep -q hello-from-rpcrdma /mnt/ours/server.txt || fail "server file not readable"

  step "$MB MiB write with fsync, drop caches, read back, compare ($dev)"
  t0=$SECONDS
  timeout 300 dd if=/tmp/blob of=/mnt/ours/blob bs=1M conv=fsync status=none || fail "write on $dev"
  echo 3 > /proc/sys/vm/drop_caches
  timeout 300 cmp /tmp/blob /mnt/ours/blob || fail "read-back differs on $dev"
  cmp /tmp/blob /export-ours/blob || fail "the server's copy differs on $dev"
  echo "LAB_METRIC nfs41_ours dev=$dev mib=$MB write_read_cmp_s=$((SECONDS - t0))"

  step "300 files in one directory, ls -l counts them ($dev)"
  mkdir /mnt/ours/many || fail "mkdir"
  for i in $(seq 1 300); do : > "/mnt/ours/many/f$i" || fail "create f$i"; done
  echo 3 > /proc/sys/vm/drop_caches
  n=$(ls -l /mnt/ours/many | grep -c '^-')
  [ "$n" = 300 ] || fail "ls -l counted $n files, not 300"

  step "rename, remove, symlink, stat ($dev)"
  mv /mnt/ours/many/f1 /mnt/ours/renamed || fail "rename"
  [ -e /export-ours/renamed ] && [ ! -e /export-ours/many/f1 ] || fail "rename not on the server"
  rm /mnt/ours/many/f2 || fail "remove"
  [ ! -e /export-ours/many/f2 ] || fail "remove not on the server"
  ln -s ../server.txt /mnt/ours/many/link || fail "symlink"
  [ "$(readlink /mnt/ours/many/link)" = ../server.txt ] || fail "readlink"
  echo 12345 > /mnt/ours/st && chmod 640 /mnt/ours/st || fail "chmod"
  [ "$(stat -c '%s %a %F' /mnt/ours/st)" = "6 640 regular file" ] || fail "stat: $(stat -c '%s %a %F' /mnt/ours/st)"
  truncate -s 3 /mnt/ours/st || fail "truncate (SETATTR size)"
  [ "$(stat -c %s /export-ours/st)" = 3 ] || fail "truncate not on the server"

  step "delegation recall: the kernel client reads and holds deleg.txt, our client writes it ($dev)"
  echo before > /export-ours/deleg.txt
  exec 3< /mnt/ours/deleg.txt || fail "open for reading"
  [ "$(head -n1 <&3)" = before ] || fail "read through the mount"
  echo after > /tmp/deleg-new
  t0=$SECONDS
  RPCRDMA_VERBS_DEV=$dev timeout 120 "$BIN" nfs --vers 4.1 --provider verbs --addr "$IP:20049" \
    --export / put /tmp/deleg-new deleg.txt 2> "$LAB_OUT/deleg-put-$dev.err" \
    || { cat "$LAB_OUT/deleg-put-$dev.err"; exec 3<&-; fail "our client's put over the delegated file"; }
  echo "LAB_METRIC nfs41_ours_recall dev=$dev put_s=$((SECONDS - t0))"
  exec 3<&-
  [ "$(cat /export-ours/deleg.txt)" = after ] || fail "the put did not land"
  echo 3 > /proc/sys/vm/drop_caches
  [ "$(cat /mnt/ours/deleg.txt)" = after ] || fail "the kernel client reads stale data after the recall"

  step "unmount; the server's counters ($dev)"
  umount /mnt/ours || fail "umount"
  kill -INT "$spid"; wait "$spid"
  grep 'rpcrdma serve: nfs:' "$log"
  [ "$(counter "$log" '.*nfs: NFS4 READ [0-9]* calls .*write \([0-9]*\).*')" -gt 0 ] || fail "no Write chunks used by READ"
  [ "$(counter "$log" '.*nfs: NFS4 COMPOUND [0-9]* calls (chunks: read \([0-9]*\).*')" -gt 0 ] || fail "no Read chunks used by WRITE"
  [ "$(counter "$log" '.*nfs: NFS4 COMPOUND .*reply \([0-9]*\)).*')" -gt 0 ] || fail "no Reply chunks used"
  grep 'backchannel:' "$log"
  [ "$(counter "$log" '.*backchannel: CB_NULL sent \([0-9]*\) .*')" -gt 0 ] \
    || { dmesg | tail -n 30; fail "no CB_NULL sent on the backchannel"; }
  [ "$(counter "$log" '.*backchannel: CB_NULL sent [0-9]* answered \([0-9]*\) .*')" -gt 0 ] \
    || { dmesg | tail -n 30; fail "the kernel client answered no CB_NULL on the backchannel"; }
  [ "$(counter "$log" '.*CB_RECALL sent \([0-9]*\) .*')" -gt 0 ] \
    || { dmesg | tail -n 30; fail "no CB_RECALL sent on the backchannel"; }
  [ "$(counter "$log" '.*CB_RECALL sent [0-9]* answered \([0-9]*\) .*')" -gt 0 ] \
    || { dmesg | tail -n 30; fail "the kernel client answered no CB_RECALL"; }
  [ "$(counter "$log" '.*delegations granted [0-9]* returned \([0-9]*\) .*')" -gt 0 ] \
    || fail "no delegation returned"
  [ "$(counter "$log" '.*delegations granted [0-9]* returned [0-9]* revoked \([0-9]*\).*')" = 0 ] \
    || fail "a delegation was revoked"
  rm -rf /export-ours/blob /export-ours/many /export-ours/renamed /export-ours/st /export-ours/deleg.txt
}

for dev in ${NFS4_DEVS:-siw0 rxe0}; do
  step "$dev alone on eth0"
  rdma link show | awk '{print $2}' | while read -r l; do rdma link delete "${l%/*}" 2>/dev/null; done
  case $dev in
    siw*) rdma link add "$dev" type siw netdev eth0 || fail "rdma link add $dev" ;;
    rxe*) rdma link add "$dev" type rxe netdev eth0 || fail "rdma link add $dev" ;;
  esac
  wait_for 30 "$dev port active" sh -c "ibv_devinfo -d $dev | grep -q PORT_ACTIVE"
  ours41_over "$dev"
done
echo "NFS_OURS41_OK"
