#!/usr/bin/env bash
# vmtest/sdroot.sh: builds (once, cached) the root filesystem image that
# `vmtest/run.sh --systemd` boots: Debian bookworm minbase with systemd,
# dbus and pam_systemd, the user artest (1000:1000) with lingering enabled,
# so that its systemd user manager runs from boot, and vmtest.service,
# which runs the tests (/vmtest/init) once that manager is up.
#
# Output: $work/sdroot/root.ext4 (raw ext4, about 250 MB used). run.sh boots
# it with qemu's snapshot=on, so the image is never written. Rebuilt only
# when this script changes. Needs root (debootstrap, chroot) and the
# debootstrap package; packages come from Debian's mirror through
# debootstrap, the same registry apt uses.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=${VMTEST_WORK:-$here/work}
out=$work/sdroot
img=$out/root.ext4
stamp=$out/stamp
want=$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)

log() { echo "vmtest/sdroot: $*" >&2; }
die() {
	echo "vmtest/sdroot: error: $*" >&2
	exit 3
}

if [[ -f $img && -f $stamp && $(cat "$stamp") == "$want" ]]; then
	log "cached: $img"
	exit 0
fi
[[ $(id -u) -eq 0 ]] || die "building the systemd root needs root (debootstrap, chroot); run as root once, the image is cached in $out"
command -v debootstrap >/dev/null || die "debootstrap not found; run vmtest/deps.sh"
mke2fs_bin=$(command -v mke2fs || echo /usr/sbin/mke2fs)
[[ -x $mke2fs_bin ]] || die "mke2fs not found (e2fsprogs)"

# The mirror apt already uses, else Debian's default.
mirror=$(awk '/^URIs:/ && $2 ~ /debian\/?$/ { print $2; exit }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
[[ -n $mirror ]] || mirror=$(awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
[[ -n $mirror ]] || mirror=http://deb.debian.org/debian

tree=$out/tree
rm -rf "$tree" "$img" "$stamp"
mkdir -p "$out"
log "debootstrap bookworm (minbase + systemd, dbus, libpam-systemd) from $mirror"
t0=$SECONDS
debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,libpam-systemd \
	bookworm "$tree" "$mirror" >"$out/debootstrap.log" 2>&1 ||
	die "debootstrap failed; see $out/debootstrap.log"
log "debootstrap took $((SECONDS - t0)) s"

# The test user, as in the busybox VM: artest 1000:1000.
chroot "$tree" groupadd -g 1000 artest
chroot "$tree" useradd -u 1000 -g 1000 -m -s /bin/sh -c "vmtest unprivileged user" artest
# Lingering: logind starts user@1000.service at boot, as for a user with
# `loginctl enable-linger artest`.
mkdir -p "$tree/var/lib/systemd/linger"
: >"$tree/var/lib/systemd/linger/artest"

echo vmtest >"$tree/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tvmtest\n' >"$tree/etc/hosts"
: >"$tree/etc/fstab"
# Nothing that would compete with the tests or wait for a network.
for u in getty@tty1.service serial-getty@ttyS0.service getty.target apt-daily.timer apt-daily-upgrade.timer \
	dpkg-db-backup.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer systemd-pstore.service \
	systemd-networkd-wait-online.service systemd-timesyncd.service remote-fs.target; do
	ln -sf /dev/null "$tree/etc/systemd/system/$u"
done
rm -rf "$tree"/etc/systemd/system/{getty,timers}.target.wants

cat >"$tree/etc/systemd/system/vmtest.service" <<'EOF'
[Unit]
Description=agentrun vmtest runner
Wants=user@1000.service dbus.service systemd-logind.service
After=user@1000.service dbus.service systemd-logind.service

[Service]
Type=simple
Environment=VMTEST_SYSTEMD=1
ExecStart=/usr/bin/busybox sh /vmtest/init
StandardInput=null
StandardOutput=tty
StandardError=inherit
TTYPath=/dev/ttyS0
TTYReset=no
TTYVHangup=no

[Install]
WantedBy=default.target
EOF
mkdir -p "$tree/etc/systemd/system/default.target.wants"
ln -sf ../vmtest.service "$tree/etc/systemd/system/default.target.wants/vmtest.service"

# Smaller image: package caches, docs and locales are not needed.
rm -rf "$tree"/var/cache/apt/* "$tree"/var/lib/apt/lists/* "$tree"/usr/share/doc/* \
	"$tree"/usr/share/man/* "$tree"/usr/share/locale/*

log "making $img"
truncate -s 1G "$img.tmp"
"$mke2fs_bin" -q -F -t ext4 -m 0 -L vmtest-root -d "$tree" "$img.tmp" ||
	die "mke2fs -d failed"
mv "$img.tmp" "$img"
rm -rf "$tree"
echo "$want" >"$stamp"
log "done: $img ($(du -h "$img" | cut -f1) used)"
