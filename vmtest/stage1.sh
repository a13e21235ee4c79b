#!/payload/usr/bin/busybox sh
# vmtest stage 1: the initramfs's /init. The kernel unpacks the cpio into
# rootfs, which pivot_root(2) refuses to leave (it has no parent mount), and
# a sandbox runtime needs pivot_root. So copy the real root (/payload) into a
# tmpfs and switch_root into it; stage 2 (/vmtest/init = vmtest/init.sh) runs
# the tests from there.
B=/payload/usr/bin/busybox
$B mkdir -p /dev /newroot
$B mount -t devtmpfs devtmpfs /dev
exec 0</dev/console 1>/dev/console 2>&1
$B mount -t tmpfs -o mode=0755 tmpfs /newroot || { echo "VMTEST-FATAL: tmpfs root"; $B poweroff -f; }
if ! (cd /payload && $B tar -cf - . | $B tar -C /newroot -xf -); then
	echo "VMTEST-FATAL: copying root"
	$B poweroff -f
fi
$B mount --move /dev /newroot/dev
exec $B switch_root /newroot /vmtest/init
