# guest: the same kernel NFSv3-over-RDMA client workloads against kernel nfsd and against
# our `rpcrdma serve --nfs` (verbs provider), in one boot on siw0: dd sequential 1 MiB
# write (fsync) and read (caches dropped), fio 4 KiB random read and write at iodepth 16
# (O_DIRECT), and `rpcrdma nfs bench` against both servers. Prints LAB_METRIC lines with
# the ratio ours/kernel for each (goal >= 1.0; reported, not asserted: TCG timing is for
# orientation). Fails only if a workload fails.
# Our server is the release build (the kernel is optimised code too); ci.sh builds it.
#   usage: nfs-compare.sh [RPCRDMA_BIN]   (default: target/release/rpcrdma, --features verbs)
set -uo pipefail
. "$(dirname "$0")/common.sh"
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
BIN=${1:-$ROOT/target/release/rpcrdma}
IP=$LAB_GUEST_IP
MB=${NFS_MB:-64}
SECS=${FIO_SECONDS:-10}
[ -x "$BIN" ] || fail "rpcrdma binary $BIN missing (cargo build --release -p rpcrdma-tools --features verbs)"
command -v fio >/dev/null || fail "fio missing (tools/lab/setup.sh installs it)"

step "load modules; siw0 alone on eth0"
load_rdma_modules
for m in nfsd rpcrdma; do modprobe "$m" || fail "modprobe $m"; done
rdma link add siw0 type siw netdev eth0 || fail "rdma link add siw0"
wait_for 30 "siw0 port active" sh -c 'ibv_devinfo -d siw0 | grep -q PORT_ACTIVE'
ulimit -l unlimited || fail "ulimit -l unlimited"
mkdir -p /export-k /export-o /mnt/k /mnt/o /run/rpcbind /var/lib/nfs/rpc_pipefs /var/lib/nfs/v4recovery
mount -t tmpfs -o size=$((MB * 3 + 128))m tmpfs /export-k
mount -t tmpfs -o size=$((MB * 3 + 128))m tmpfs /export-o

step "kernel nfsd on rdma 20049; ours on rdma 20050 with MOUNT on tcp 20058"
echo "/export-k *(rw,no_root_squash,insecure,no_subtree_check)" > /etc/exports
mount -t nfsd nfsd /proc/fs/nfsd || fail "mount nfsd"
mount -t rpc_pipefs sunrpc /var/lib/nfs/rpc_pipefs || fail "mount rpc_pipefs"
rpcbind -w || fail rpcbind
exportfs -ra || fail exportfs
rpc.mountd || fail rpc.mountd
rpc.nfsd 4 || fail rpc.nfsd
echo rdma 20049 > /proc/fs/nfsd/portlist || fail "kernel rdma listener"
RPCRDMA_VERBS_DEV=siw0 "$BIN" serve --provider verbs --addr "$IP:20050" --nfs /export-o \
  --mount-port 20058 --duration 1800 > "$LAB_OUT/serve.log" 2>&1 &
spid=$!
wait_for 30 "our RDMA listener" cm_listening siw0 20050
wait_for 30 "our MOUNT listener" tcp_listening 20058
timeout 120 mount -t nfs -o vers=3,proto=rdma,port=20049,nolock "$IP:/export-k" /mnt/k || fail "mount kernel nfsd"
timeout 120 mount -t nfs -o vers=3,proto=rdma,port=20050,mountport=20058,mountproto=tcp,nolock \
  "$IP:/" /mnt/o || fail "mount ours"

# rate MiB SECONDS_FLOAT -> MiB/s
rate() { python3 -c "import sys; print('%.1f' % (float(sys.argv[1]) / max(float(sys.argv[2]), 1e-6)))" "$1" "$2"; }
ratio() { python3 -c "import sys; k=float(sys.argv[1]); print('%.2f' % (float(sys.argv[2]) / k if k > 0 else 0))" "$1" "$2"; }
now() { date +%s.%N; }
declare -A R
# Each workload runs against the kernel and then against ours before the next one, so a
# slow spell of the (shared, emulated) machine hits both sides of a ratio alike.
for t in k o; do
  step "dd sequential 1 MiB write on /mnt/$t"
  t0=$(now)
  timeout 600 dd if=/dev/zero of="/mnt/$t/seq" bs=1M count="$MB" conv=fsync status=none || fail "dd write $t"
  R[$t.dd_write]=$(rate "$MB" "$(python3 -c "print($(now) - $t0)")")
done
for t in k o; do
  step "dd sequential 1 MiB read on /mnt/$t (caches dropped)"
  echo 3 > /proc/sys/vm/drop_caches
  t0=$(now)
  timeout 600 dd if="/mnt/$t/seq" of=/dev/null bs=1M status=none || fail "dd read $t"
  R[$t.dd_read]=$(rate "$MB" "$(python3 -c "print($(now) - $t0)")")
done
for rw in randread randwrite; do
  for t in k o; do
    step "fio $rw 4 KiB iodepth 16 on /mnt/$t (${SECS}s)"
    timeout $((SECS + 120)) fio --name="$rw" --filename="/mnt/$t/fio.dat" --size=32M --rw="$rw" \
      --bs=4k --iodepth=16 --ioengine=libaio --direct=1 --runtime="$SECS" --time_based \
      --output-format=json --output="$LAB_OUT/fio-$t-$rw.json" >/dev/null 2>&1 || fail "fio $rw on $t"
    R[$t.$rw]=$(python3 -c "import json,sys; j=json.load(open(sys.argv[1]))['jobs'][0]; print('%.0f' % (j['read']['iops'] + j['write']['iops']))" "$LAB_OUT/fio-$t-$rw.json")
  done
done
echo "LAB_METRIC nfs3_compare dd_write_mib_s kernel=${R[k.dd_write]} ours=${R[o.dd_write]} ratio=$(ratio "${R[k.dd_write]}" "${R[o.dd_write]}")"
echo "LAB_METRIC nfs3_compare dd_read_mib_s kernel=${R[k.dd_read]} ours=${R[o.dd_read]} ratio=$(ratio "${R[k.dd_read]}" "${R[o.dd_read]}")"
echo "LAB_METRIC nfs3_compare fio_randread_4k_qd16_iops kernel=${R[k.randread]} ours=${R[o.randread]} ratio=$(ratio "${R[k.randread]}" "${R[o.randread]}")"
echo "LAB_METRIC nfs3_compare fio_randwrite_4k_qd16_iops kernel=${R[k.randwrite]} ours=${R[o.randwrite]} ratio=$(ratio "${R[k.randwrite]}" "${R[o.randwrite]}")"
umount /mnt/k /mnt/o || fail umount

step "rpcrdma nfs bench against both servers"
# bench OP NFS-OPTIONS...: ops/s of 64 KiB calls at depth 8.
bench() {
  local op=$1; shift
  RPCRDMA_VERBS_DEV=siw0 timeout 120 "$BIN" nfs --provider verbs "$@" bench --op "$op" --size 65536 \
    --depth 8 --duration 3 --json 2>/dev/null |
    python3 -c "import json,sys; print('%.0f' % json.load(sys.stdin)['ops_per_sec'])"
}
for op in read write; do
  k=$(bench "$op" --addr "$IP:20049" --export /export-k) || fail "bench $op kernel"
  o=$(bench "$op" --addr "$IP:20050" --mount-port 20058) || fail "bench $op ours"
  echo "LAB_METRIC nfs3_compare rpcrdma_nfs_bench_${op}_64k_qd8_ops_s kernel=$k ours=$o ratio=$(ratio "$k" "$o")"
done
kill -INT "$spid"; wait "$spid"
grep 'rpcrdma serve: nfs:' "$LAB_OUT/serve.log"
echo "NFS_COMPARE_DONE"
