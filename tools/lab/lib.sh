# Shared settings for the lab's host-side scripts; sourced, never executed.
#
# LAB (default /var/tmp/rpcrdma-lab) holds everything the lab builds or downloads: it sits
# outside any checkout so a clean CI clone reuses a machine's earlier setup, and /var/tmp
# survives reboots where /tmp may not.
LAB=${LAB:-/var/tmp/rpcrdma-lab}
LAB_TOOLS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

lab_die() { echo "lab: $*" >&2; exit 4; }

# Per-kernel artefacts live under $LAB/k/$KV so a newer Debian kernel ABI never mixes with an
# older build; $LAB/kernel.env names the one setup.sh finished last.
lab_load_kernel() {
  [ -f "$LAB/kernel.env" ] || lab_die "no $LAB/kernel.env: run tools/lab/setup.sh first (LAB=$LAB)"
  # shellcheck disable=SC1091
  . "$LAB/kernel.env"
  KDIR=$LAB/k/$KV
  KROOT=$KDIR/root
  [ -f "$KDIR/initramfs.cpio.gz" ] || lab_die "$KDIR/initramfs.cpio.gz missing: run tools/lab/setup.sh"
}

# lab_clock_args: with LAB_GUEST_TSC=1, "tsc=reliable". Under TCG the guest kernel's boot
# check finds the vCPUs' TSCs "unsynchronized" and falls back to the HPET, which the vDSO
# cannot read: every clock_gettime is then a system call plus an emulated HPET read,
# 1753 ns against 181 ns on the TSC (tools/lab/verbs-lat.sh with LAT_PROBE, same boot
# settings otherwise). TCG derives every vCPU's TSC from one monotonic host clock, so
# they are in step; the engine reads the clock once per poll, as on production hosts
# (TSC, vDSO), where a read is tens of nanoseconds. The verbs steps set it.
lab_clock_args() {
  [ "${LAB_GUEST_TSC:-0}" = 1 ] && echo "tsc=reliable"
  return 0
}

# Fills QEMU_ARGS for a boot whose /out share is $1 and whose kernel command line gets $2.
# env: LAB_ACCEL=tcg|kvm (KVM does not work on our machines: kvm_pvm without VMX, the
#      kernel hangs in its decompressor), LAB_MEM (2G), LAB_SMP (2),
#      LAB_HOSTFWD (comma-separated qemu hostfwd rules, e.g.
#      "hostfwd=tcp:127.0.0.1:15555-:5555"), LAB_KAPPEND (more kernel arguments),
#      LAB_QEMU_EXTRA (more qemu arguments, word-split), LAB_GUEST_TSC=1 (the guest's
#      clock on the TSC: see lab_clock_args).
# shellcheck disable=SC2034,SC2054  # QEMU_ARGS is the output; commas are qemu syntax
lab_qemu_args() {
  local out=$1 append=$2 accel kernel net
  if [ "${LAB_ACCEL:-tcg}" = kvm ]; then accel=(-enable-kvm -cpu host); else accel=(-accel tcg -cpu max); fi
  kernel=$KDIR/vmlinux; [ -f "$kernel" ] || kernel=$KROOT/boot/vmlinuz-$KV
  net=user,id=n0${LAB_HOSTFWD:+,$LAB_HOSTFWD}
  # no_timer_check: under TCG on a loaded host the kernel's IO-APIC timer check can
  # miss its ticks and panic at boot ("IO-APIC + timer doesn't work!", seen with the
  # host's two cores busy compiling); the check tests hardware a qemu guest does not
  # have, so it is skipped, as cloud images do.
  # shellcheck disable=SC2206
  QEMU_ARGS=("${accel[@]}" -m "${LAB_MEM:-2G}" -smp "${LAB_SMP:-2}" -no-reboot
    -display none -serial mon:stdio
    -kernel "$kernel" -initrd "$KDIR/initramfs.cpio.gz"
    -append "console=ttyS0 panic=-1 loglevel=4 no_timer_check $(lab_clock_args) lab.init=$LAB_TOOLS/guest-init.sh $append ${LAB_KAPPEND:-}"
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap
    -virtfs "local,path=$out,mount_tag=out,security_model=none,multidevs=remap"
    -netdev "$net" -device virtio-net-pci,netdev=n0,mac=52:54:00:12:34:56
    ${LAB_QEMU_EXTRA:-})
}
