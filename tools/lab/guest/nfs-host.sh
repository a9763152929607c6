# guest half of tools/lab/nfs-host-siw.sh: the kernel NFSv3 client on siw0 mounts the
# host's `rpcrdma serve --nfs --provider siw` at 10.0.2.2:HPORT (MOUNT on tcp MPORT), then
# the kernel NFSv4.1 client mounts the same server (reads the blob, counts the files,
# creates v41.txt).
#   usage: nfs-host.sh HPORT MPORT
set -uo pipefail
. "$(dirname "$0")/common.sh"
HPORT=${1:?usage}; MPORT=${2:?usage}
HOST=$LAB_HOST_IP
MB=${NFS_MB:-32}
step "load modules; siw0 alone on eth0"
load_rdma_modules
modprobe rpcrdma || fail "modprobe rpcrdma"
rdma link add siw0 type siw netdev eth0 || fail "rdma link add siw0"
wait_for 30 "siw0 port active" sh -c 'ibv_devinfo -d siw0 | grep -q PORT_ACTIVE'
mkdir -p /mnt/host
dd if=/dev/urandom of="$LAB_OUT/blob" bs=1M count="$MB" status=none

step "kernel NFSv3 mount of the host's rpcrdma serve over siw ($HOST:$HPORT)"
timeout 120 mount -t nfs -o "vers=3,proto=rdma,port=$HPORT,mountport=$MPORT,mountproto=tcp,nolock" \
  "$HOST:/" /mnt/host || fail "NFSv3 rdma mount of the host server"
grep -qE 'xprt:[[:space:]]+rdma' /proc/self/mountstats || fail "mount is not using rdma"

step "$MB MiB write with fsync, drop caches, read back, compare"
t0=$SECONDS
timeout 300 dd if="$LAB_OUT/blob" of=/mnt/host/blob bs=1M conv=fsync status=none || fail "write"
echo 3 > /proc/sys/vm/drop_caches
timeout 300 cmp "$LAB_OUT/blob" /mnt/host/blob || fail "read-back differs"
echo "LAB_METRIC nfs3_host_siw mib=$MB write_read_cmp_s=$((SECONDS - t0))"

step "200 files, ls -l counts them; symlink"
mkdir /mnt/host/many || fail mkdir
for i in $(seq 1 200); do : > "/mnt/host/many/f$i" || fail "create f$i"; done
echo 3 > /proc/sys/vm/drop_caches
n=$(ls -l /mnt/host/many | grep -c '^-')
[ "$n" = 200 ] || fail "ls -l counted $n files, not 200"
ln -s /etc/passwd /mnt/host/link || fail symlink
[ "$(readlink /mnt/host/link)" = /etc/passwd ] || fail readlink
umount /mnt/host || fail umount

step "kernel NFSv4.1 mount of the same server over siw ($HOST:$HPORT)"
mkdir -p /mnt/host41
timeout 120 mount -t nfs -o "vers=4.1,proto=rdma,port=$HPORT" "$HOST:/" /mnt/host41 ||
  { dmesg | tail -n 30; fail "NFSv4.1 rdma mount of the host server"; }
grep -E 'nfs4|vers=4.1' /proc/mounts | grep -q /mnt/host41 || fail "not an NFSv4.1 mount"
echo 3 > /proc/sys/vm/drop_caches
timeout 300 cmp "$LAB_OUT/blob" /mnt/host41/blob || fail "NFSv4.1 read of the NFSv3-written blob differs"
n=$(find /mnt/host41/many -type f | wc -l)
[ "$n" = 200 ] || fail "NFSv4.1 sees $n files, not 200"
echo hello-over-v41 > /mnt/host41/v41.txt || fail "NFSv4.1 create"
sync
umount /mnt/host41 || fail "umount NFSv4.1"
step "guest half done"
