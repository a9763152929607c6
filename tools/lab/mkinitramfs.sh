#!/bin/bash
# Builds $KDIR/initramfs.cpio.gz: busybox plus the few modules needed to reach the host's
# root (virtio-net for the network, 9p for the file share, overlay for a writable root).
# Its /init mounts the host's / read-only over virtio-9p as the lower layer of an overlay
# with a tmpfs upper, bind-mounts the lab kernel's modules over /lib/modules, mounts the
# per-run share at /out, and switch_roots into the script named by lab.init= on the kernel
# command line (boot.sh passes tools/lab/guest-init.sh of the checkout that booted it).
# Called by setup.sh with LAB, KV and KDIR set.
set -euo pipefail
: "${LAB:?}" "${KV:?}" "${KDIR:?}"
KROOT=$KDIR/root
IRD=$KDIR/initramfs
rm -rf "$IRD"; mkdir -p "$IRD"/{bin,dev,proc,sys,lower,rw,newroot,mods}
cp /bin/busybox "$IRD/bin/busybox"
file_is_static() { ! ldd "$1" >/dev/null 2>&1; }
file_is_static "$IRD/bin/busybox" || { echo "mkinitramfs: /bin/busybox is not static (install busybox-static)" >&2; exit 1; }

# modprobe prints "builtin X" for built-in drivers; only real .ko files need copying.
MODS=$(for m in virtio_pci virtio_net 9pnet_virtio 9p overlay; do
  modprobe -d "$KROOT" -S "$KV" --show-depends "$m" | awk '$1=="insmod"{print $2}'; done | awk '!seen[$0]++')
: > "$IRD/mods/order"
for f in $MODS; do cp "$f" "$IRD/mods/"; basename "$f" >> "$IRD/mods/order"; done

cat > "$IRD/init" <<INIT
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
CMDLINE=\$(cat /proc/cmdline)
INIT=\$(echo "\$CMDLINE" | sed -n 's/.*lab\.init=\([^ ]*\).*/\1/p')
# Batch boots (lab.batch) power off on failure so the host reports it at once instead of
# waiting for its timeout; interactive boots get a rescue shell.
rescue() { echo "LAB_BOOT_FAILED: \$*"; case "\$CMDLINE" in *lab.batch*) poweroff -f ;; esac; exec sh; }
for m in \$(cat /mods/order); do insmod /mods/\$m || echo "insmod \$m failed"; done
# cache=loose: fast metadata under TCG, at the price that host files changed after boot
# may stay stale in the guest (build before booting).
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=loose,ro hostroot /lower || rescue "9p mount of host / failed"
mount -t tmpfs -o size=\${LAB_TMPFS:-2g} rw /rw; mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot || rescue "overlay mount failed"
mkdir -p /newroot/lib/modules /newroot/out
mount --bind /lower$KROOT/lib/modules /newroot/lib/modules || rescue "modules bind mount failed"
# No cache on the run share: the host must see guest writes (results, logs) at once.
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 out /newroot/out || rescue "9p mount of the run share (out) failed"
for d in proc sys dev; do mount --move /\$d /newroot/\$d; done
[ -n "\$INIT" ] && [ -f "/newroot\$INIT" ] || rescue "lab.init=\$INIT not found"
exec switch_root /newroot /bin/bash "\$INIT"
INIT
chmod +x "$IRD/init"
(cd "$IRD" && find . | cpio -o -H newc --quiet | gzip -1 > "$KDIR/initramfs.cpio.gz.tmp")
mv "$KDIR/initramfs.cpio.gz.tmp" "$KDIR/initramfs.cpio.gz"
echo "  initramfs $(du -h "$KDIR/initramfs.cpio.gz" | cut -f1), modules: $(tr '\n' ' ' < "$IRD/mods/order")"
rm -rf "$IRD"
