# Helpers for guest scripts (sourced; bash). Every wait has a deadline so a hung peer fails
# the step by name instead of burning the host's whole timeout.
GUEST_STEP=start
step() { GUEST_STEP=$1; echo "==> [$(cut -d' ' -f1 /proc/uptime)s] $1"; }
fail() { echo "GUEST FAIL in step '$GUEST_STEP': $*"; exit 1; }
# wait_for SECONDS WHAT CMD...: polls CMD until it succeeds or SECONDS pass.
wait_for() {
  local secs=$1 what=$2 end; shift 2
  end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$end" ] || fail "timed out after ${secs}s waiting for $what"
    sleep 0.5
  done
}
# Servers started in the background must not outlive a failed step.
trap 'kill $(jobs -p) 2>/dev/null' EXIT
# An rdma_cm listener on PORT, bound to device DEV (rdma res shows which device it took).
cm_listening() { rdma res show cm_id | grep -q "^link $1/.* state LISTEN .* src-addr [0-9.]*:$2 "; }
tcp_listening() { ss -ltnH "sport = :$1" | grep -q LISTEN; }
load_rdma_modules() {
  local m
  for m in rdma_rxe siw rdma_ucm; do modprobe "$m" || fail "modprobe $m"; done
}

# ours_setup MB: what the steps serving NFS from OUR server need: the RDMA modules and
# rpcrdma, a tmpfs export at /export-ours (with server.txt), /tmp/blob of MB MiB of
# random octets, and unlimited locked memory (registered pools are pinned memory).
ours_setup() {
  local mb=$1
  step "load modules"
  load_rdma_modules
  modprobe rpcrdma || fail "modprobe rpcrdma"
  mkdir -p /export-ours /mnt/ours
  mount -t tmpfs -o size=$((mb * 3 + 64))m tmpfs /export-ours || fail "tmpfs"
  echo hello-from-rpcrdma > /export-ours/server.txt
  dd if=/dev/urandom of=/tmp/blob bs=1M count="$mb" status=none
  ulimit -l unlimited || fail "ulimit -l unlimited"
}
