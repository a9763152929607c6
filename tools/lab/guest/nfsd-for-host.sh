# guest half of tools/lab/nfs-host-client.sh: kernel nfsd on siw0 with an RDMA listener on
# 20049 and mountd on tcp 20048, both reached by the host through qemu hostfwds. Writes
# /export/from-server.bin, prints its sha256 (FROM_SHA=...) and GUEST_NFSD_READY, then
# waits for the host's client to put /export/host-done and checks what the host put:
# every put-*.bin must equal from-server.bin (the host gets it and puts it back).
#   env: NFSD_WAIT (seconds to wait for the host, default 400), NFS_MB (8)
set -uo pipefail
. "$(dirname "$0")/common.sh"
MB=${NFS_MB:-8}
WAIT=${NFSD_WAIT:-400}

step "load modules; siw0 alone on eth0"
load_rdma_modules
for m in nfsd rpcrdma; do modprobe "$m" || fail "modprobe $m"; done
rdma link add siw0 type siw netdev eth0 || fail "rdma link add siw0"
wait_for 30 "siw0 port active" sh -c 'ibv_devinfo -d siw0 | grep -q PORT_ACTIVE'

step "kernel nfsd: rdma 20049, mountd tcp 20048, export /export"
mkdir -p /export /run/rpcbind /var/lib/nfs/rpc_pipefs /var/lib/nfs/v4recovery
mount -t tmpfs -o size=$((MB * 6 + 64))m tmpfs /export
dd if=/dev/urandom of=/export/from-server.bin bs=1M count="$MB" status=none
# NFSv4's pseudo-root as in nfs-client.sh: its own tmpfs (fsid=0; the guest's overlayfs
# "/" cannot be exported) with /export bind-mounted at "export".
mkdir -p /v4root
mount -t tmpfs -o size=1m tmpfs /v4root
mkdir -p /v4root/export
mount --bind /export /v4root/export || fail "bind /export under the v4 pseudo-root"
cat > /etc/exports <<'EXPORTS'
/export *(rw,no_root_squash,insecure,no_subtree_check)
/v4root *(ro,fsid=0,insecure,no_subtree_check,crossmnt)
/v4root/export *(rw,no_root_squash,insecure,no_subtree_check)
EXPORTS
mount -t nfsd nfsd /proc/fs/nfsd || fail "mount nfsd"
echo 10 > /proc/fs/nfsd/nfsv4gracetime || fail "nfsv4gracetime"
mount -t rpc_pipefs sunrpc /var/lib/nfs/rpc_pipefs || fail "mount rpc_pipefs"
rpcbind -w || fail rpcbind
exportfs -ra || fail exportfs
rpc.mountd -p 20048 || fail rpc.mountd
rpc.nfsd 4 || fail rpc.nfsd
echo rdma 20049 > /proc/fs/nfsd/portlist || fail "adding the rdma listener"
wait_for 30 "nfsd's RDMA listener" cm_listening siw0 20049
wait_for 30 "mountd on 20048" tcp_listening 20048
echo "FROM_SHA=$(sha256sum /export/from-server.bin | cut -d' ' -f1)"
echo GUEST_NFSD_READY

step "wait for the host's client (up to ${WAIT}s)"
wait_for "$WAIT" "the host's done marker" test -e /export/host-done
ls -l /export
n=0
for f in /export/put-*.bin; do
  [ -e "$f" ] || fail "the host put no file"
  cmp /export/from-server.bin "$f" || fail "$f differs from what the host got"
  n=$((n + 1))
done
echo "NFSD_FOR_HOST_OK files=$n"
