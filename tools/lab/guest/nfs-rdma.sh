# guest: kernel NFS over RDMA, server and client in the same guest, on siw0 and then rxe0
# (each alone on eth0 so rdma_cm cannot pick the other). The server exports a tmpfs and
# listens for RDMA on 20049; the client mounts it with proto=rdma (NFSv3 and NFSv4.2),
# writes 32 MiB, drops caches, reads it back and compares.
set -uo pipefail
. "$(dirname "$0")/common.sh"
IP=$LAB_GUEST_IP
MB=${NFS_MB:-32}

step "load modules"
load_rdma_modules
for m in nfsd rpcrdma; do modprobe "$m" || fail "modprobe $m"; done

step "start the NFS server with an RDMA listener on 20049"
mkdir -p /export /mnt/nfs /run/rpcbind /var/lib/nfs/rpc_pipefs /var/lib/nfs/v4recovery
mount -t tmpfs -o size=$((MB * 3))m tmpfs /export
echo hello-from-server > /export/server.txt
echo "/export *(rw,no_root_squash,insecure,fsid=0,no_subtree_check)" > /etc/exports
mount -t nfsd nfsd /proc/fs/nfsd || fail "mount nfsd"
mount -t rpc_pipefs sunrpc /var/lib/nfs/rpc_pipefs || fail "mount rpc_pipefs"
rpcbind -w || fail rpcbind
exportfs -ra || fail exportfs
rpc.mountd || fail rpc.mountd
rpc.nfsd 4 || fail rpc.nfsd
echo rdma 20049 > /proc/fs/nfsd/portlist || fail "adding the rdma listener"
cat /proc/fs/nfsd/portlist
grep -q '^rdma 20049' /proc/fs/nfsd/portlist || fail "no rdma listener in portlist"
dd if=/dev/urandom of=/tmp/blob bs=1M count="$MB" status=none

# nfs_over DEV: both NFS versions over RDMA, asserting the client's connection sits on DEV.
nfs_over() {
  local dev=$1
  step "NFSv3 over RDMA on $dev: ${MB} MiB write, drop caches, read, compare"
  timeout 120 mount -t nfs -o vers=3,proto=rdma,port=20049,nolock "$IP:/export" /mnt/nfs || fail "NFSv3 rdma mount on $dev"
  grep -qE 'xprt:[[:space:]]+rdma' /proc/self/mountstats || fail "mount is not using the rdma transport"
  rdma res show cm_id | grep -q "^link $dev/" || fail "no rdma_cm connection on $dev"
  local t0=$SECONDS
  timeout 300 dd if=/tmp/blob of=/mnt/nfs/blob bs=1M conv=fsync status=none || fail "write over NFSv3/$dev"
  echo 3 > /proc/sys/vm/drop_caches
  timeout 300 cmp /tmp/blob /mnt/nfs/blob || fail "read-back differs over NFSv3/$dev"
  echo "LAB_METRIC nfs3_rdma dev=$dev mib=$MB write_read_cmp_s=$((SECONDS - t0))"
  grep -q hello-from-server /mnt/nfs/server.txt || fail "server file not readable"
  umount /mnt/nfs || fail "umount NFSv3"
  rm -f /export/blob

  step "NFSv4.2 over RDMA on $dev"
  timeout 120 mount -t nfs -o vers=4.2,proto=rdma,port=20049 "$IP:/" /mnt/nfs || fail "NFSv4.2 rdma mount on $dev"
  grep -qE 'xprt:[[:space:]]+rdma' /proc/self/mountstats || fail "v4.2 mount is not using the rdma transport"
  echo "v4-write-$dev" > /mnt/nfs/v4.txt || fail "write over NFSv4.2/$dev"
  sync
  [ "$(cat /export/v4.txt)" = "v4-write-$dev" ] || fail "NFSv4.2 write not seen on the server"
  umount /mnt/nfs || fail "umount NFSv4.2"
}

step "siw0 alone on eth0"
rdma link add siw0 type siw netdev eth0 || fail "rdma link add siw0"
nfs_over siw0

step "rxe0 alone on eth0"
rdma link delete siw0 || fail "rdma link delete siw0"
rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0"
nfs_over rxe0
echo "NFS_RDMA_OK"
