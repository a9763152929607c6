# guest: OUR NFSv3 and NFSv4.1 clients (`rpcrdma nfs --provider verbs`) against the
# kernel's nfsd over RDMA, on siw0 and then rxe0 (each alone on eth0). NFSv3: the MOUNT
# port comes from the guest's rpcbind (no --mount-port). NFSv4.1: no MOUNT; a session
# (EXCHANGE_ID, CREATE_SESSION, RECLAIM_COMPLETE) and the export looked up from the
# pseudo-root (/export has no fsid=0, so LOOKUP "export"). Each: ls of the export, put of
# an 8 MiB file compared on the server's disk, get of it (and of a file the server wrote)
# compared octet by octet, a missing file named (NFS3ERR_NOENT, NFS4ERR_NOENT), and a
# short bench of READs and WRITEs. The NFSv4.1 client's backchannel: Linux nfsd never
# sends CB_NULL to a 4.1 client (nfsd4_run_cb_work marks the callback path up without a
# probe), so what proves it is a delegation recall: `rpcrdma nfs hold` opens a file for
# reading with a read delegation, a local write on the server breaks nfsd's lease, nfsd
# sends CB_SEQUENCE + CB_RECALL over RDMA (RFC 8167), our client answers and returns
# the delegation (DELEGRETURN), which lets the local write finish.
#   usage: nfs-client.sh [RPCRDMA_BIN]   (default: target/debug/rpcrdma of this checkout,
#   built with --features verbs)
set -uo pipefail
. "$(dirname "$0")/common.sh"
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
BIN=${1:-$ROOT/target/debug/rpcrdma}
IP=$LAB_GUEST_IP
MB=${NFS_MB:-8}
[ -x "$BIN" ] || fail "rpcrdma binary $BIN missing (cargo build -p rpcrdma-tools --features verbs)"

step "load modules; kernel nfsd with an RDMA listener on 20049"
load_rdma_modules
for m in nfsd rpcrdma; do modprobe "$m" || fail "modprobe $m"; done
mkdir -p /export /run/rpcbind /var/lib/nfs/rpc_pipefs /var/lib/nfs/v4recovery
mount -t tmpfs -o size=$((MB * 4 + 64))m tmpfs /export
dd if=/dev/urandom of=/export/from-server.bin bs=1M count="$MB" status=none
# NFSv4: /export has no fsid=0, so the client reaches it from the pseudo-root by LOOKUP
# "export". mountd would build that pseudo-root on the guest's "/", but "/" is an overlayfs
# nfsd cannot export ("Cannot export /, possibly unsupported filesystem or fsid= required";
# the kernel's own NFSv4.1 client then fails to mount too), so the pseudo-root is a small
# tmpfs of its own (fsid=0) holding /export bind-mounted at "export".
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
# The NFSv4 grace period (90 s by default) refuses OPEN with NFS4ERR_GRACE; 10 s is the
# least nfsd takes, and our client retries NFS4ERR_GRACE within a bound.
echo 10 > /proc/fs/nfsd/nfsv4gracetime || fail "nfsv4gracetime"
# nfsd hands out no delegation while any grace period runs (locks_in_grace), lockd's
# included, which is 90 s by default from the start of nfsd: the recall step below would
# find none on a fast run. lockd came with the nfsd module; its grace starts with nfsd.
echo 10 > /proc/sys/fs/nfs/nlm_grace_period || fail "nlm_grace_period"
mount -t rpc_pipefs sunrpc /var/lib/nfs/rpc_pipefs || fail "mount rpc_pipefs"
rpcbind -w || fail rpcbind
exportfs -ra || fail exportfs
rpc.mountd || fail rpc.mountd
rpc.nfsd 4 || fail rpc.nfsd
NFSD_STARTED=$SECONDS
grep -q '+4.1' /proc/fs/nfsd/versions || fail "nfsd does not offer NFSv4.1: $(cat /proc/fs/nfsd/versions)"
echo rdma 20049 > /proc/fs/nfsd/portlist || fail "adding the rdma listener"
dd if=/dev/urandom of=/tmp/to-server.bin bs=1M count="$MB" status=none
ulimit -l unlimited || fail "ulimit -l unlimited"

client_over() {
  local dev=$1
  nfs() { RPCRDMA_VERBS_DEV=$dev timeout 120 "$BIN" nfs --provider verbs --addr "$IP:20049" --export /export "$@"; }
  step "rpcrdma nfs ls against kernel nfsd on $dev (MOUNT port from rpcbind)"
  nfs ls / > "$LAB_OUT/ls-$dev.txt" || fail "ls on $dev"
  cat "$LAB_OUT/ls-$dev.txt"
  grep -q "$((MB * 1048576)) from-server.bin" "$LAB_OUT/ls-$dev.txt" || fail "ls does not show from-server.bin with its size"

  step "put ${MB} MiB, compared on the server ($dev)"
  nfs put /tmp/to-server.bin "put-$dev.bin" || fail "put on $dev"
  cmp /tmp/to-server.bin "/export/put-$dev.bin" || fail "the server's copy differs ($dev)"

  step "get both files back, compared octet by octet ($dev)"
  nfs get "put-$dev.bin" /tmp/back.bin || fail "get on $dev"
  cmp /tmp/to-server.bin /tmp/back.bin || fail "get of the put file differs ($dev)"
  nfs get from-server.bin /tmp/back2.bin || fail "get of the server's file on $dev"
  cmp /export/from-server.bin /tmp/back2.bin || fail "get of the server's file differs ($dev)"
  rm -f /tmp/back.bin /tmp/back2.bin

  step "errors are named ($dev)"
  nfs get no-such-file - 2> "$LAB_OUT/err-$dev.txt" && fail "get of a missing file succeeded"
  grep -q NFS3ERR_NOENT "$LAB_OUT/err-$dev.txt" || fail "missing file: $(cat "$LAB_OUT/err-$dev.txt")"

  step "bench READ and WRITE against kernel nfsd ($dev)"
  for op in read write; do
    nfs bench --op "$op" --size 65536 --depth 4 --duration 2 --file "bench-$dev.dat" \
      || fail "bench $op on $dev"
  done | tee "$LAB_OUT/bench-$dev.txt"
  sed -n 's/^nfs bench \([a-z]*\) .* \([0-9]*\) ops\/s, \([0-9.]*\) GB\/s.*/LAB_METRIC nfs3_client_bench dev='"$dev"' op=\1 ops_s=\2 gb_s=\3/p' "$LAB_OUT/bench-$dev.txt"
}

client41_over() {
  local dev=$1
  nfs4() { RPCRDMA_VERBS_DEV=$dev timeout 120 "$BIN" nfs --vers 4.1 --provider verbs --addr "$IP:20049" --export /export "$@"; }
  step "rpcrdma nfs --vers 4.1 ls against kernel nfsd on $dev (export from the pseudo-root)"
  nfs4 ls / > "$LAB_OUT/ls41-$dev.txt" || fail "4.1 ls on $dev"
  cat "$LAB_OUT/ls41-$dev.txt"
  grep -q "$((MB * 1048576)) from-server.bin" "$LAB_OUT/ls41-$dev.txt" || fail "4.1 ls does not show from-server.bin with its size"
  grep -q "$((MB * 1048576)) put-$dev.bin" "$LAB_OUT/ls41-$dev.txt" || fail "4.1 ls does not show the NFSv3 put-$dev.bin with its size"

  step "4.1 put ${MB} MiB, compared on the server ($dev)"
  nfs4 put /tmp/to-server.bin "put41-$dev.bin" || fail "4.1 put on $dev"
  cmp /tmp/to-server.bin "/export/put41-$dev.bin" || fail "the server's 4.1 copy differs ($dev)"

  step "4.1 get both files back, compared octet by octet ($dev)"
  nfs4 get "put41-$dev.bin" /tmp/back.bin || fail "4.1 get on $dev"
  cmp /tmp/to-server.bin /tmp/back.bin || fail "4.1 get of the put file differs ($dev)"
  nfs4 get from-server.bin /tmp/back2.bin || fail "4.1 get of the server's file on $dev"
  cmp /export/from-server.bin /tmp/back2.bin || fail "4.1 get of the server's file differs ($dev)"
  rm -f /tmp/back.bin /tmp/back2.bin

  step "4.1 errors are named ($dev)"
  nfs4 get no-such-file - 2> "$LAB_OUT/err41-$dev.txt" && fail "4.1 get of a missing file succeeded"
  grep -q NFS4ERR_NOENT "$LAB_OUT/err41-$dev.txt" || fail "4.1 missing file: $(cat "$LAB_OUT/err41-$dev.txt")"
  nfs4 ls no-such-dir 2> "$LAB_OUT/err41b-$dev.txt" && fail "4.1 ls of a missing directory succeeded"
  grep -q NFS4ERR_NOENT "$LAB_OUT/err41b-$dev.txt" || fail "4.1 missing dir: $(cat "$LAB_OUT/err41b-$dev.txt")"

  step "4.1 bench READ and WRITE against kernel nfsd ($dev)"
  for op in read write; do
    nfs4 bench --op "$op" --size 65536 --depth 4 --duration 2 --file "bench41-$dev.dat" \
      2> "$LAB_OUT/bench41-$op-$dev.err" || { cat "$LAB_OUT/bench41-$op-$dev.err"; fail "4.1 bench $op on $dev"; }
  done | tee "$LAB_OUT/bench41-$dev.txt"
  # The session asks for a backchannel (CONN_BACK_CHAN); nfsd sends no CB_NULL to an
  # NFSv4.1 client (nfsd4_run_cb_work marks the path up without one), so the bench's
  # backward calls are 0: reported here, and the recall step below proves the path.
  cat "$LAB_OUT"/bench41-*-"$dev".err
  sed -n 's/.*backchannel (\([a-z ]*\)): answered \([0-9]*\) CB_NULL.*transport: \([0-9]*\) calls.*/LAB_METRIC nfs41_client_backchannel dev='"$dev"' grant="\1" cb_null_answered=\2 backward_calls=\3/p' "$LAB_OUT/bench41-read-$dev.err"
  sed -n 's/^nfs bench \([a-z]*\) .* \([0-9]*\) ops\/s, \([0-9.]*\) GB\/s.*/LAB_METRIC nfs41_client_bench dev='"$dev"' op=\1 ops_s=\2 gb_s=\3/p' "$LAB_OUT/bench41-$dev.txt"
  [ "$(grep -c '^nfs bench' "$LAB_OUT/bench41-$dev.txt")" = 2 ] || fail "4.1 bench printed no results ($dev)"

  step "4.1 nfsd recalls our client's read delegation over the backchannel ($dev)"
  local hold=$LAB_OUT/hold-$dev.err hpid t0
  echo held > "/export/hold-$dev.txt"
  # Both grace periods (10 s each, set above) must be over before nfsd delegates.
  while [ $((SECONDS - NFSD_STARTED)) -lt 12 ]; do sleep 1; done
  nfs4 hold "hold-$dev.txt" --seconds 60 2> "$hold" &
  hpid=$!
  wait_for 30 "our client's OPEN of hold-$dev.txt" grep -q 'delegation' "$hold"
  grep -q 'delegation granted' "$hold" || { cat "$hold"; fail "nfsd gave our client no read delegation ($dev)"; }
  cat /proc/fs/nfsd/clients/*/info > "$LAB_OUT/nfsd-clients-$dev.txt" 2>/dev/null
  # 6.1 may not print it; where it does, nfsd must see the path up.
  if grep -q 'callback state' "$LAB_OUT/nfsd-clients-$dev.txt"; then
    grep -q 'callback state: UP' "$LAB_OUT/nfsd-clients-$dev.txt" \
      || { cat "$LAB_OUT/nfsd-clients-$dev.txt"; fail "nfsd's callback state is not UP ($dev)"; }
  fi
  t0=$SECONDS
  # A local write on the server conflicts with the delegation: it waits for the return.
  timeout 60 sh -c "echo more >> /export/hold-$dev.txt" || fail "the local write never finished ($dev)"
  echo "LAB_METRIC nfs41_client_recall dev=$dev local_write_s=$((SECONDS - t0))"
  wait "$hpid" || { cat "$hold"; fail "hold on $dev"; }
  cat "$hold"
  grep -q 'recalled 1 returned 1' "$hold" || fail "the recall was not answered and returned ($dev)"
  [ "$(sed -n 's/.*transport: \([0-9]*\) calls.*/\1/p' "$hold")" -gt 0 ] \
    || fail "no backward call reached our client's transport ($dev)"
  sed -n 's/.*backchannel (\([a-z ]*\)): answered \([0-9]*\) CB_NULL, \([0-9]*\) CB_COMPOUND.*transport: \([0-9]*\) calls.*/LAB_METRIC nfs41_client_recall_backchannel dev='"$dev"' grant="\1" cb_compound_answered=\3 backward_calls=\4/p' "$hold"
}

step "siw0 alone on eth0"
rdma link add siw0 type siw netdev eth0 || fail "rdma link add siw0"
wait_for 30 "siw0 port active" sh -c 'ibv_devinfo -d siw0 | grep -q PORT_ACTIVE'
client_over siw0
client41_over siw0

step "rxe0 alone on eth0"
rdma link delete siw0 || fail "rdma link delete siw0"
rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0"
wait_for 30 "rxe0 port active" sh -c 'ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE'
client_over rxe0
client41_over rxe0
echo "NFS_CLIENT_OK"
