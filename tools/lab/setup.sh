#!/bin/bash
# One-time, idempotent host setup of the qemu kernel RDMA lab (see tools/lab/README.md).
# Needs root (apt-get). Everything it builds or downloads goes to $LAB (default
# /var/tmp/rpcrdma-lab). A second run with nothing missing does no network access.
#
# env: LAB        lab directory
#      LAB_KV     kernel ABI to use (e.g. 6.1.0-56-amd64); default: the one Debian's
#                 linux-image-amd64 currently depends on, or the one already built in $LAB
#      LAB_FORCE=1  re-resolve the kernel even if $LAB already has a complete one
set -eEuo pipefail
. "$(dirname "$0")/lib.sh"
export DEBIAN_FRONTEND=noninteractive
mkdir -p "$LAB/dl" "$LAB/logs" "$LAB/k"

STEP=start
# shellcheck disable=SC2154  # rc is assigned inside the trap
# set -E hands the trap to command substitutions too; report once, from the top shell.
trap 'rc=$?; [ "$BASH_SUBSHELL" = 0 ] && echo "setup.sh: FAILED in step \"$STEP\" (exit $rc); logs in $LAB/logs" >&2; exit $rc' ERR
step() { STEP=$1; printf '[setup %3ss] %s\n' "$SECONDS" "$1"; }

# Quiet on success, the log's tail on failure: the full apt/make chatter lives in $LAB/logs.
logged() {
  local log="$LAB/logs/$1.log"; shift
  if ! "$@" >"$log" 2>&1; then
    echo "---- last lines of $log:" >&2; tail -n 30 "$log" >&2; return 1
  fi
}

APT_UPDATED=
apt_update_once() { [ -n "$APT_UPDATED" ] || { logged apt-update apt-get update; APT_UPDATED=1; }; }

missing_pkgs() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || echo "$p"
  done
}

[ "$(id -u)" = 0 ] || { echo "setup.sh: must run as root (installs Debian packages)" >&2; exit 1; }
command -v flock >/dev/null || { echo "setup.sh: flock (util-linux) missing" >&2; exit 1; }
# Two setups racing on one $LAB would corrupt the kernel tree; serialise them.
exec 9>"$LAB/.setup.lock"; flock 9

step "resolve kernel version"
KV=${LAB_KV:-}
if [ -z "$KV" ] && [ -z "${LAB_FORCE:-}" ] && [ -f "$LAB/kernel.env" ]; then
  KV=$(. "$LAB/kernel.env"; echo "$KV")
  [ -f "$LAB/k/$KV/.complete" ] || KV=
fi
if [ -z "$KV" ]; then
  apt_update_once
  KV=$( (apt-cache depends linux-image-amd64 2>/dev/null || true) | sed -n 's/^ *Depends: linux-image-\([0-9].*-amd64\)$/\1/p' | head -n1)
  [ -n "$KV" ] || { echo "cannot resolve the kernel behind linux-image-amd64" >&2; false; }
fi
KDIR=$LAB/k/$KV; KROOT=$KDIR/root
if [ -f "$KDIR/kernel.env" ]; then
  KPKGVER=$(. "$KDIR/kernel.env"; echo "$KPKGVER")
else
  apt_update_once
  KPKGVER=$( (apt-cache show --no-all-versions "linux-image-$KV" 2>/dev/null || true) | sed -n 's/^Version: //p' | head -n1)
  [ -n "$KPKGVER" ] || { echo "linux-image-$KV is not in the apt lists" >&2; false; }
fi
echo "  kernel $KV (package $KPKGVER) in $KDIR"
mkdir -p "$KDIR"

step "install host packages"
# qemu runs the guest; busybox-static/cpio/kmod build the initramfs; rdma-core, perftest and
# the NFS server are the guest's userspace (the guest runs the host's / over 9p); the -dev
# packages let host-built test binaries link against libibverbs/librdmacm.
PKGS=(qemu-system-x86 busybox-static cpio kmod iproute2 procps util-linux python3 xz-utils gzip
      rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest libibverbs-dev librdmacm-dev
      nfs-kernel-server nfs-common rpcbind fio)
[ -f "$KROOT/lib/modules/$KV/updates/siw.ko" ] || PKGS+=(make gcc "linux-headers-$KV")
mapfile -t MISSING < <(missing_pkgs "${PKGS[@]}")
if [ "${#MISSING[@]}" -gt 0 ]; then
  echo "  installing: ${MISSING[*]}"
  apt_update_once
  logged apt-install apt-get install -y --no-install-recommends "${MISSING[@]}"
fi

step "download and extract kernel image"
if [ ! -f "$KROOT/boot/vmlinuz-$KV" ]; then
  DEB=$LAB/dl/linux-image-${KV}_${KPKGVER}_amd64.deb
  if [ ! -f "$DEB" ]; then
    apt_update_once
    cd "$LAB/dl"; logged download-image apt-get download "linux-image-$KV=$KPKGVER"; cd - >/dev/null
  fi
  rm -rf "$KROOT.tmp"; dpkg-deb -x "$DEB" "$KROOT.tmp"
  rm -rf "$KROOT"; mv "$KROOT.tmp" "$KROOT"
  rm -f "$DEB"
fi
printf 'KV=%s\nKPKGVER=%s\n' "$KV" "$KPKGVER" > "$KDIR/kernel.env"

step "extract uncompressed vmlinux"
# TCG boots the plain ELF about twice as fast as the XZ bzImage (no decompressor to emulate).
if [ ! -f "$KDIR/vmlinux" ]; then
  python3 - "$KROOT/boot/vmlinuz-$KV" "$KDIR/vmlinux.tmp" <<'PY'
import lzma, sys
data = open(sys.argv[1], 'rb').read()
at = data.find(b'\xfd7zXZ\x00')
if at < 0:
    sys.exit("no XZ payload in " + sys.argv[1])
out = lzma.LZMADecompressor().decompress(data[at:])
if out[:4] != b'\x7fELF':
    sys.exit("XZ payload is not an ELF vmlinux")
open(sys.argv[2], 'wb').write(out)
PY
  mv "$KDIR/vmlinux.tmp" "$KDIR/vmlinux"
fi

step "build siw.ko out of tree"
# Debian builds its kernels without CONFIG_RDMA_SIW, so compile the driver from the
# matching linux-source package against the matching headers.
if [ ! -f "$KROOT/lib/modules/$KV/updates/siw.ko" ]; then
  SRCDEB=$LAB/dl/linux-source-6.1_${KPKGVER}_all.deb
  if [ ! -f "$SRCDEB" ]; then
    apt_update_once
    cd "$LAB/dl"; logged download-source apt-get download "linux-source-6.1=$KPKGVER"; cd - >/dev/null
  fi
  rm -rf "$KDIR/lsrc" "$KDIR/siw-build"; mkdir -p "$KDIR/lsrc"
  dpkg-deb --fsys-tarfile "$SRCDEB" | tar -x -C "$KDIR/lsrc" ./usr/src/linux-source-6.1.tar.xz
  tar -xJf "$KDIR/lsrc/usr/src/linux-source-6.1.tar.xz" -C "$KDIR/lsrc" linux-source-6.1/drivers/infiniband/sw/siw
  cp -r "$KDIR/lsrc/linux-source-6.1/drivers/infiniband/sw/siw" "$KDIR/siw-build"
  logged siw-build make -C "/usr/src/linux-headers-$KV" M="$KDIR/siw-build" CONFIG_RDMA_SIW=m modules
  mkdir -p "$KROOT/lib/modules/$KV/updates"
  cp "$KDIR/siw-build/siw.ko" "$KROOT/lib/modules/$KV/updates/siw.ko"
  rm -rf "$KDIR/lsrc" "$SRCDEB"
fi
depmod -b "$KROOT" "$KV"
modinfo -b "$KROOT" -k "$KV" -F vermagic siw | grep -q "^$KV " \
  || { echo "siw.ko vermagic does not match $KV" >&2; false; }

step "build initramfs"
# Rebuilt only when the script that makes it changes, so repeated setups stay cheap.
STAMP=$(cat "$LAB_TOOLS/mkinitramfs.sh" /bin/busybox | sha256sum | cut -c1-16)
if [ "$(cat "$KDIR/initramfs.stamp" 2>/dev/null)" != "$STAMP" ] || [ ! -f "$KDIR/initramfs.cpio.gz" ]; then
  LAB="$LAB" KV="$KV" KDIR="$KDIR" "$LAB_TOOLS/mkinitramfs.sh"
  echo "$STAMP" > "$KDIR/initramfs.stamp"
fi

touch "$KDIR/.complete"
printf 'KV=%s\nKPKGVER=%s\n' "$KV" "$KPKGVER" > "$LAB/kernel.env.tmp"; mv "$LAB/kernel.env.tmp" "$LAB/kernel.env"
STEP=finished
echo "[setup ${SECONDS}s] lab ready in $LAB (kernel $KV)"
