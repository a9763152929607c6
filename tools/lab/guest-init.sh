#!/bin/bash
# PID 1 inside the guest, started by the initramfs with the host's / as an overlay root.
# Batch boots (run.sh): sources /out/lab-run.sh (test path, arguments, environment, cwd,
# written by the host), runs the test with bash, records its exit status in /out/rc and
# prints LAB_RESULT=PASS|FAIL, then powers off. Interactive boots (boot.sh): root shell on
# the serial console. Markers printed here are what run.sh parses; keep them stable.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
mount -t tmpfs tmpfs /run
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
hostname labguest
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
export LAB_GUEST_IP=10.0.2.15 LAB_HOST_IP=10.0.2.2 LAB_OUT=/out

uptime_s() { cut -d' ' -f1 /proc/uptime; }
echo "LAB_BOOTED uptime=$(uptime_s)s kernel=$(uname -r)"

finish() {
  dmesg > /out/dmesg.log 2>/dev/null
  sync
  /bin/busybox poweroff -f
  # If poweroff itself fails, exiting PID 1 panics the kernel; panic=-1 reboots and qemu's
  # -no-reboot turns that into an exit, so the host never hangs here.
  exit 1
}

if [ -f /out/lab-run.sh ]; then
  uptime_s > /out/booted
  LAB_ARGS=()
  # shellcheck disable=SC1091
  . /out/lab-run.sh
  cd "${LAB_CWD:-/}" 2>/dev/null || cd /
  echo "LAB_START test=$LAB_TEST uptime=$(uptime_s)s"
  bash "$LAB_TEST" "${LAB_ARGS[@]}" 2>&1 | tee /out/guest.log
  rc=${PIPESTATUS[0]}
  echo "$rc" > /out/rc
  if [ "$rc" = 0 ]; then echo "LAB_RESULT=PASS uptime=$(uptime_s)s"
  else echo "LAB_RESULT=FAIL rc=$rc uptime=$(uptime_s)s"; fi
  finish
fi

if grep -q lab.batch /proc/cmdline; then
  echo "LAB_BOOT_FAILED: batch boot without /out/lab-run.sh (run share not mounted?)"
  finish
fi
echo "interactive shell (poweroff with: busybox poweroff -f; or Ctrl-a x in qemu)"
setsid -c bash -l </dev/ttyS0 >/dev/ttyS0 2>&1
finish
