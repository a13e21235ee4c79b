#!/payload/usr/bin/busybox sh
# vmtest stage 1: the initramfs's /init. The kernel unpacks the cpio into
# rootfs, which pivot_root(2) refuses to leave (it has no parent mount), and
# a sandbox runtime needs pivot_root. So copy the real root (/payload) into a
# tmpfs and switch_root into it; stage 2 (/vmtest/init = vmtest/init.sh) runs
# the tests from there.
#
# With --systemd (/payload/vmtest/systemd exists) the root is instead the
# Debian image on the virtio disk: load the disk's modules, mount it, add
# the test payload (/vmtest, /usr/local/bin, busybox for the runner) and
# switch_root into systemd, whose vmtest.service runs stage 2.
B=/payload/usr/bin/busybox
$B mkdir -p /dev /newroot
$B mount -t devtmpfs devtmpfs /dev
exec 0</dev/console 1>/dev/console 2>&1
if [ -e /payload/vmtest/systemd ]; then
	while IFS= read -r ko; do
		# unquoted on purpose: a line is "path [param=value...]"
		# shellcheck disable=SC2086
		set -- $ko
		f=$1
		shift
		$B insmod "/payload$f" "$@" || echo "VMTEST-WARN - - insmod $f failed"
	done </payload/vmtest/modules
	i=0
	while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do
		$B sleep 0.1
		i=$((i + 1))
	done
	$B mount -t ext4 /dev/vda /newroot || { echo "VMTEST-FATAL: mount /dev/vda"; $B poweroff -f; }
	$B cp -a /payload/vmtest /newroot/ &&
		$B mkdir -p /newroot/usr/local/bin &&
		$B cp -a /payload/usr/local/bin/. /newroot/usr/local/bin/ &&
		$B cp /payload/usr/bin/busybox /newroot/usr/bin/busybox ||
		{ echo "VMTEST-FATAL: copying the payload"; $B poweroff -f; }
	: >/newroot/vmtest/modules # loaded already
	$B mount --move /dev /newroot/dev
	exec $B switch_root /newroot /lib/systemd/systemd
fi
$B mount -t tmpfs -o mode=0755 tmpfs /newroot || { echo "VMTEST-FATAL: tmpfs root"; $B poweroff -f; }
if ! (cd /payload && $B tar -cf - . | $B tar -C /newroot -xf -); then
	echo "VMTEST-FATAL: copying root"
	$B poweroff -f
fi
$B mount --move /dev /newroot/dev
exec $B switch_root /newroot /vmtest/init
