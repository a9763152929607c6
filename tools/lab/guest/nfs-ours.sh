# guest: the kernel's NFSv3 client over RDMA against OUR server (`rpcrdma serve --nfs`
# on the verbs provider), on siw0 and then rxe0 (each alone on eth0). MOUNT goes over TCP
# (mountport 20048), NFS over RDMA on 20049. Workload: 32 MiB written with fsync, caches
# dropped, read back and compared; 1000 files created in one directory and counted with
# ls -l; rename, remove, symlink/readlink, stat fields. The server's stop lines must show
# that Write chunks (READ), Read chunks (WRITE) and Reply chunks (READDIR/READDIRPLUS)
# were used.
#   usage: nfs-ours.sh [RPCRDMA_BIN]   (default: target/debug/rpcrdma of this checkout,
#   built with --features verbs)
set -uo pipefail
. "$(dirname "$0")/common.sh"
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
BIN=${1:-$ROOT/target/debug/rpcrdma}
IP=$LAB_GUEST_IP
MB=${NFS_MB:-32}
[ -x "$BIN" ] || fail "rpcrdma binary $BIN missing (cargo build -p rpcrdma-tools --features verbs)"

ours_setup "$MB"

# chunks_used LOG PROC KIND: the count of KIND chunks PROC's stop line reports (0 when
# PROC was never called).
chunks_used() {
  local n
  n=$(sed -n "s/.*nfs: NFS3 $2 [0-9]* calls .*$3 \([0-9]*\).*/\1/p" "$1" | head -n1)
  echo "${n:-0}"
}

# ours_over DEV [rpcbind]: with "rpcbind", the server registers with the guest's rpcbind
# (--rpcbind) and mount.nfs finds MOUNT through it (no mountport=).
ours_over() {
  local dev=$1 via=${2:-} log=$LAB_OUT/serve-$1.log spid t0 n extra=() mopts
  [ "$via" = rpcbind ] && extra=(--rpcbind)
  step "rpcrdma serve --nfs ${extra[*]} on $dev ($IP:20049, MOUNT on tcp 20048)"
  RPCRDMA_VERBS_DEV=$dev "$BIN" serve --provider verbs --addr "$IP:20049" --nfs /export-ours \
    --mount-port 20048 --duration 900 "${extra[@]}" > "$log" 2>&1 &
  spid=$!
  wait_for 30 "our RDMA listener on $dev" cm_listening "$dev" 20049
  wait_for 30 "our MOUNT listener" tcp_listening 20048
  grep 'MOUNT v3 on tcp' "$log"
  mopts=vers=3,proto=rdma,port=20049,mountport=20048,mountproto=tcp,nolock
  if [ "$via" = rpcbind ]; then
    rpcinfo -p > "$LAB_OUT/rpcinfo-$dev.txt"; cat "$LAB_OUT/rpcinfo-$dev.txt"
    grep -qE '^ +100005 +3 +tcp +20048' "$LAB_OUT/rpcinfo-$dev.txt" || fail "MOUNT v3 not registered with rpcbind"
    rpcinfo | grep -qE '^ +100003 +3 +rdma +10\.0\.2\.15\.78\.81 ' || fail "NFS v3 rdma not registered with rpcbind"
    mopts=vers=3,proto=rdma,port=20049,mountproto=tcp,nolock
  fi

  step "kernel NFSv3 mount over RDMA on $dev (MOUNT ${via:-at port 20048})"
  timeout 120 mount -t nfs -o "$mopts" \
    "$IP:/" /mnt/ours || { cat "$log"; fail "NFSv3 rdma mount of our server on $dev"; }
  grep -qE 'xprt:[[:space:]]+rdma' /proc/self/mountstats || fail "mount is not using rdma"
  rdma res show cm_id | grep -q "^link $dev/" || fail "no rdma_cm connection on $dev"
  grep -q hello-from-rpcrdma /mnt/ours/server.txt || fail "server file not readable"

  step "$MB MiB write with fsync, drop caches, read back, compare ($dev)"
  t0=$SECONDS
  timeout 300 dd if=/tmp/blob of=/mnt/ours/blob bs=1M conv=fsync status=none || fail "write on $dev"
  echo 3 > /proc/sys/vm/drop_caches
  timeout 300 cmp /tmp/blob /mnt/ours/blob || fail "read-back differs on $dev"
  cmp /tmp/blob /export-ours/blob || fail "the server's copy differs on $dev"
  echo "LAB_METRIC nfs3_ours dev=$dev mib=$MB write_read_cmp_s=$((SECONDS - t0))"

  step "1000 files in one directory, ls -l counts them ($dev)"
  mkdir /mnt/ours/many || fail "mkdir"
  for i in $(seq 1 1000); do : > "/mnt/ours/many/f$i" || fail "create f$i"; done
  echo 3 > /proc/sys/vm/drop_caches
  n=$(ls -l /mnt/ours/many | grep -c '^-')
  [ "$n" = 1000 ] || fail "ls -l counted $n files, not 1000"

  step "rename, remove, symlink, stat ($dev)"
  mv /mnt/ours/many/f1 /mnt/ours/renamed || fail "rename"
  [ -e /export-ours/renamed ] && [ ! -e /export-ours/many/f1 ] || fail "rename not on the server"
  rm /mnt/ours/many/f2 || fail "remove"
  [ ! -e /export-ours/many/f2 ] || fail "remove not on the server"
  ln -s ../server.txt /mnt/ours/many/link || fail "symlink"
  [ "$(readlink /mnt/ours/many/link)" = ../server.txt ] || fail "readlink"
  grep -q hello-from-rpcrdma /mnt/ours/many/link || fail "reading through the link (client-side)"
  ln -s /etc/passwd /mnt/ours/abs || fail "absolute symlink"
  [ "$(readlink /export-ours/abs)" = /etc/passwd ] || fail "symlink target not stored verbatim"
  echo 12345 > /mnt/ours/st && chmod 640 /mnt/ours/st || fail "chmod"
  [ "$(stat -c '%s %a %F' /mnt/ours/st)" = "6 640 regular file" ] || fail "stat: $(stat -c '%s %a %F' /mnt/ours/st)"
  [ "$(stat -c '%i' /mnt/ours/st)" = "$(stat -c '%i' /export-ours/st)" ] || fail "fileid is not the inode"

  step "unmount; the server's counters ($dev)"
  umount /mnt/ours || fail "umount"
  kill -INT "$spid"; wait "$spid"
  grep 'rpcrdma serve: nfs:' "$log"
  if [ "$via" = rpcbind ]; then
    ! rpcinfo -p | grep -qE '^ +100005 +3 +tcp +20048' || fail "MOUNT still registered after the server stopped"
  fi
  [ "$(chunks_used "$log" READ write)" -gt 0 ] || fail "no Write chunks used by READ"
  [ "$(chunks_used "$log" WRITE read)" -gt 0 ] || fail "no Read chunks used by WRITE"
  n=$(( $(chunks_used "$log" READDIRPLUS reply) + $(chunks_used "$log" READDIR reply) ))
  [ "$n" -gt 0 ] || fail "no Reply chunks used by READDIR/READDIRPLUS"
  rm -rf /export-ours/blob /export-ours/many /export-ours/renamed /export-ours/abs /export-ours/st
}

step "siw0 alone on eth0"
rdma link add siw0 type siw netdev eth0 || fail "rdma link add siw0"
wait_for 30 "siw0 port active" sh -c 'ibv_devinfo -d siw0 | grep -q PORT_ACTIVE'
ours_over siw0

step "rxe0 alone on eth0"
rdma link delete siw0 || fail "rdma link delete siw0"
rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0"
wait_for 30 "rxe0 port active" sh -c 'ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE'
step "rpcbind for the rxe0 pass"
mkdir -p /run/rpcbind
rpcbind -w || fail rpcbind
ours_over rxe0 rpcbind
echo "NFS_OURS_OK"
