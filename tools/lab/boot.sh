#!/bin/bash
# Interactive lab guest: a root shell on the serial console (Ctrl-a x quits qemu).
# For scripted runs use run.sh. The run share is mounted at /out in the guest.
# env: see lab_qemu_args in lib.sh (LAB_HOSTFWD, LAB_MEM, LAB_SMP, LAB_KAPPEND, ...).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
lab_load_kernel
RUN=$LAB/runs/interactive-$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$RUN"
lab_qemu_args "$RUN" ""
exec qemu-system-x86_64 "${QEMU_ARGS[@]}" "$@"
