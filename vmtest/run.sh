#!/usr/bin/env bash
# vmtest/run.sh: run Go test binaries inside a pure cgroup v2 VM.
#
# Boots Debian bookworm's cloud kernel (linux-image-cloud-amd64, 6.1) under
# qemu with TCG (nested KVM hangs on the development hosts) and
# cgroup_no_v1=all, from an initramfs holding busybox, agentrun and the test
# binaries; runs every test binary as root and as an unprivileged user with a
# delegated cgroup; reads the results off the serial console.
#
# See vmtest/README.md. Exit status: 0 all passed; 1 a test failed; 2 usage;
# 3 the VM run itself failed (timeout, crash, results missing).

# ls | sort -V below picks the newest of a few well-named files.
# shellcheck disable=SC2012
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
work=${VMTEST_WORK:-$here/work}

usage() {
	cat <<'EOF'
usage: vmtest/run.sh [options] TESTBIN[@MODES]...

TESTBIN are test binaries built with `go test -c` (dynamically linked is
fine: their shared libraries are copied in). Each runs once per mode: the
modes of --modes, or those after its @ (e.g. integration.test@root,user).

options:
  --agentrun PATH     agentrun binary; installed as /usr/local/bin/agentrun
                      and exported to tests as AGENTRUN_BIN
  --modes LIST        comma-separated run modes (default root,user):
                        root          uid 0, in the root cgroup
                        user          uid 1000, in a delegated cgroup
                        user-nodeleg  uid 1000, in a cgroup it does not own
                        user-systemd  uid 1000 under a real systemd with a
                                      user manager, its cgroup not delegated
                                      (needs --systemd)
  --systemd           boot Debian bookworm with systemd (vmtest/sdroot.sh
                      builds the root image once, as root) instead of the
                      busybox init; only the modes root and user-systemd
  --bin-run NAME=REGEXP
                      -test.run for the test binary named NAME only
  --run REGEXP        passed to every test binary as -test.run
  --test-arg ARG      extra argument for every test binary (repeatable)
  --test-timeout DUR  -test.timeout for each binary (default 10m)
  --env K=V           extra environment variable for the tests (repeatable)
  --module NAME       extra kernel module to load, with its dependencies
                      (repeatable; overlay veth tun dummy are always loaded)
  --host-bin SRC[:DEST]
                      copy a host program and the shared libraries it needs
                      into the VM, at DEST or else at SRC (repeatable;
                      /usr/bin/bash and /usr/bin/dash always are)
  --host-dir DIR      copy a host directory tree into the VM at the same
                      path, with the libraries of every ELF file in it
                      (repeatable; e.g. /usr/lib/python3.11 for python3)
  --tmp ext4|tmpfs    filesystem of /tmp, where tests' TMPDIR points (default
                      ext4: a RAM disk, like the disk-backed /tmp of a Debian
                      12 host; tmpfs on 6.1 cannot take idmapped mounts)
  --tmp-size MIB      size of an ext4 /tmp (default 1024)
  --timeout SECS      hard wall-clock limit for the VM (default 1200)
  --memory SIZE       VM memory (default 2G)
  --smp N             VM CPUs (default 2)
  --accel ACCEL       qemu accelerator (default tcg)
  -h, --help          this text

environment: VMTEST_WORK overrides the cache/work directory (vmtest/work).
EOF
}

die() {
	echo "vmtest: error: $*" >&2
	exit 3
}
usage_error() {
	echo "vmtest: $*" >&2
	echo "try: vmtest/run.sh --help" >&2
	exit 2
}
log() { echo "vmtest: $*" >&2; }

agentrun=""
modes="root,user"
test_args=()
test_timeout=10m
envs=()
modules=(overlay veth tun dummy)
host_bins=(/usr/bin/bash)
# dash is /bin/sh on Debian; it is essential, so every Debian host has it.
[[ ! -x /usr/bin/dash ]] || host_bins+=(/usr/bin/dash)
host_dirs=()
tmp_fs=ext4
tmp_size=1024
timeout=1200
memory=2G
smp=2
accel=tcg
tests=()
systemd=0
bin_runs=()

while (($#)); do
	case $1 in
	--agentrun) agentrun=${2:?--agentrun needs a path}; shift 2 ;;
	--modes) modes=${2:?--modes needs a list}; shift 2 ;;
	--run) test_args+=("-test.run=${2:?--run needs a regexp}"); shift 2 ;;
	--test-arg) test_args+=("${2:?--test-arg needs a value}"); shift 2 ;;
	--test-timeout) test_timeout=${2:?--test-timeout needs a duration}; shift 2 ;;
	--env) envs+=("${2:?--env needs K=V}"); shift 2 ;;
	--module) modules+=("${2:?--module needs a name}"); shift 2 ;;
	--host-bin) host_bins+=("${2:?--host-bin needs a path}"); shift 2 ;;
	--host-dir) host_dirs+=("${2:?--host-dir needs a directory}"); shift 2 ;;
	--tmp) tmp_fs=${2:?--tmp needs ext4 or tmpfs}; shift 2 ;;
	--tmp-size) tmp_size=${2:?--tmp-size needs MiB}; shift 2 ;;
	--timeout) timeout=${2:?--timeout needs seconds}; shift 2 ;;
	--memory) memory=${2:?--memory needs a size}; shift 2 ;;
	--smp) smp=${2:?--smp needs a number}; shift 2 ;;
	--accel) accel=${2:?--accel needs a name}; shift 2 ;;
	--systemd) systemd=1; shift ;;
	--bin-run) bin_runs+=("${2:?--bin-run needs NAME=REGEXP}"); shift 2 ;;
	-h | --help) usage; exit 0 ;;
	--) shift; tests+=("$@"); break ;;
	-*) usage_error "unknown option $1" ;;
	*) tests+=("$1"); shift ;;
	esac
done

((${#tests[@]})) || usage_error "no test binaries given"
[[ $timeout =~ ^[0-9]+$ ]] || usage_error "--timeout must be whole seconds, got '$timeout'"
[[ $tmp_fs == ext4 || $tmp_fs == tmpfs ]] || usage_error "--tmp must be ext4 or tmpfs, got '$tmp_fs'"
[[ $tmp_size =~ ^[0-9]+$ ]] || usage_error "--tmp-size must be whole MiB, got '$tmp_size'"
# check_modes LIST: a comma-separated list of known modes, no repeats.
check_modes() {
	local -a list
	local m
	IFS=, read -r -a list <<<"$1"
	((${#list[@]})) || usage_error "empty mode list"
	for m in "${list[@]}"; do
		if ((systemd)); then
			case $m in root | user-systemd) ;; *) usage_error "mode '$m' with --systemd (root, user-systemd)" ;; esac
		else
			case $m in root | user | user-nodeleg) ;; user-systemd) usage_error "mode user-systemd needs --systemd" ;; *) usage_error "unknown mode '$m' (root, user, user-nodeleg)" ;; esac
		fi
	done
	[[ $(printf '%s\n' "${list[@]}" | sort | uniq -d) == "" ]] || usage_error "repeated mode in '$1'"
}
check_modes "$modes"
for kv in "${envs[@]}"; do
	[[ $kv == [A-Za-z_]*=* && $kv != *$'\n'* ]] || usage_error "--env wants K=V, got '$kv'"
done
for a in "${test_args[@]}"; do
	[[ $a != *$'\n'* ]] || usage_error "test arguments cannot hold newlines"
done
for br in "${bin_runs[@]}"; do
	[[ $br == ?*=?* && $br != *$'\n'* ]] || usage_error "--bin-run wants NAME=REGEXP, got '$br'"
done
# Split TESTBIN@MODES into parallel arrays; count the expected results.
declare -A seen=()
test_paths=()
test_modes=()
expected=0
for t in "${tests[@]}"; do
	tm=$modes
	if [[ $t == *@* && ! -e $t ]]; then
		tm=${t##*@}
		t=${t%@*}
	fi
	check_modes "$tm"
	[[ -f $t && -x $t ]] || usage_error "not an executable file: $t"
	name=$(basename "$t")
	[[ $name =~ ^[A-Za-z0-9._-]+$ ]] || usage_error "test binary name '$name' must match [A-Za-z0-9._-]+"
	[[ -z ${seen[$name]:-} ]] || usage_error "two test binaries named '$name'; give them distinct names (go test -c -o)"
	seen[$name]=1
	test_paths+=("$t")
	test_modes+=("$tm")
	expected=$((expected + $(tr ',' '\n' <<<"$tm" | wc -l)))
done
if [[ -n $agentrun ]]; then
	[[ -f $agentrun && -x $agentrun ]] || usage_error "--agentrun: not an executable file: $agentrun"
fi

need() {
	command -v "$1" >/dev/null || die "$1 not found; run vmtest/deps.sh (installs ${2:-$1})"
}
need qemu-system-x86_64 qemu-system-x86
need cpio
need gzip
need dpkg-deb dpkg
need apt-get apt
need go "Go (not from apt: the project's toolchain)"
busybox_bin=/bin/busybox
[[ -x $busybox_bin ]] || die "$busybox_bin not found; run vmtest/deps.sh (installs busybox-static)"
if ldd "$busybox_bin" >/dev/null 2>&1; then
	die "$busybox_bin is dynamically linked; run vmtest/deps.sh (installs busybox-static)"
fi

mkdir -p "$work"
t_start=$SECONDS

# ---- 1. the kernel, from Debian's registry only -----------------------------
# linux-image-cloud-amd64 is a metapackage; its dependency names the real
# package. Downloads are cached in $work/debs, extractions in $work/kernel.
kernel_pkg() {
	apt-cache depends linux-image-cloud-amd64 2>/dev/null |
		awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9].*-cloud-amd64$/ { print $2; exit }'
}

pkg=$(kernel_pkg || true)
if [[ -z $pkg && $(id -u) -eq 0 ]]; then
	log "apt has no linux-image-cloud-amd64; running apt-get update"
	apt-get update -qq || log "apt-get update failed"
	pkg=$(kernel_pkg || true)
fi
if [[ -z $pkg ]]; then
	# Offline and nothing resolvable: fall back to a kernel cached earlier.
	cached=$(ls -d "$work"/kernel/linux-image-*/.complete 2>/dev/null | sort -V | tail -n1 || true)
	[[ -n $cached ]] || die "cannot resolve linux-image-cloud-amd64 with apt-cache depends (run apt-get update) and no kernel is cached in $work/kernel"
	pkg=$(basename "$(dirname "$cached")")
	log "apt cannot resolve the kernel; using cached $pkg"
fi
kdir=$work/kernel/$pkg
if [[ ! -f $kdir/.complete ]]; then
	mkdir -p "$work/debs"
	deb=$(ls "$work"/debs/"${pkg}"_*.deb 2>/dev/null | sort -V | tail -n1 || true)
	if [[ -z $deb ]]; then
		log "downloading $pkg with apt-get download"
		apt_opts=()
		[[ $(id -u) -ne 0 ]] || apt_opts=(-o APT::Sandbox::User=root)
		(cd "$work/debs" && apt-get download -q "${apt_opts[@]}" "$pkg") ||
			die "apt-get download $pkg failed"
		deb=$(ls "$work"/debs/"${pkg}"_*.deb 2>/dev/null | sort -V | tail -n1 || true)
		[[ -n $deb ]] || die "apt-get download $pkg left no .deb in $work/debs"
	fi
	log "extracting $(basename "$deb")"
	rm -rf "$kdir" "$kdir.tmp"
	mkdir -p "$kdir.tmp"
	dpkg-deb -x "$deb" "$kdir.tmp/x"
	vmlinuz=$(ls "$kdir".tmp/x/boot/vmlinuz-* 2>/dev/null | head -n1 || true)
	[[ -n $vmlinuz ]] || die "$deb holds no boot/vmlinuz-*"
	mv "$vmlinuz" "$kdir.tmp/vmlinuz"
	mdir=$(ls -d "$kdir".tmp/x/lib/modules/*/ 2>/dev/null | head -n1 || true)
	[[ -n $mdir ]] || die "$deb holds no lib/modules/<version>"
	basename "$mdir" >"$kdir.tmp/kver"
	mv "$mdir" "$kdir.tmp/modules"
	rm -rf "$kdir.tmp/x"
	touch "$kdir.tmp/.complete"
	mv "$kdir.tmp" "$kdir"
fi
kver=$(cat "$kdir/kver" 2>/dev/null || echo "${pkg#linux-image-}")
log "kernel $pkg ($kver)"

# ---- 1b. the systemd root image (--systemd), cached ---------------------------
sdimg=""
if ((systemd)); then
	bash "$here/sdroot.sh" || die "vmtest/sdroot.sh failed"
	sdimg=$work/sdroot/root.ext4
fi

# ---- 2. the initramfs --------------------------------------------------------
stage=$work/initramfs
root=$stage/payload
rm -rf "$stage"
mkdir -p "$root"/{usr/bin,usr/lib,usr/lib64,usr/local/bin,etc,proc,sys,dev,tmp,run,root,home/artest,vmtest/bin,vmtest/run}
chmod 1777 "$root/tmp"
ln -s usr/bin "$root/bin"
ln -s usr/bin "$root/sbin"
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"
ln -s bin "$root/usr/sbin"

# install_libs FILE...: copy the dynamic loader and every shared library
# that ldd names for the FILEs into the VM, at their host paths. Static
# programs and non-ELF files need nothing. One ldd call for all FILEs.
install_libs() {
	local out lib
	out=$(ldd "$@" 2>&1) || true
	if grep -q '=> not found' <<<"$out"; then
		die "missing shared libraries for $*:"$'\n'"$(grep -e '=> not found' -e ':$' <<<"$out")"
	fi
	while read -r lib; do
		[[ ! -e $root$lib ]] || continue
		mkdir -p "$(dirname "$root$lib")"
		cp -L "$lib" "$root$lib"
	done < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 }
		NF == 2 && $1 ~ /^\// && $2 ~ /^\(0x/ { print $1 }' <<<"$out" | sort -u)
}

# install_prog SRC DEST: copy a program to DEST inside the VM, with its
# libraries.
install_prog() {
	install -D -m 0755 "$1" "$root$2"
	install_libs "$1"
}

for b in "${host_bins[@]}"; do
	src=${b%%:*}
	dest=${b#*:}
	[[ $dest == /* ]] || die "--host-bin $b: the destination must be an absolute path"
	[[ -f $src && -x $src ]] || die "--host-bin: not an executable file: $src"
	install_prog "$(readlink -f "$src")" "$dest"
done
for d in "${host_dirs[@]}"; do
	[[ $d == /* && -d $d ]] || die "--host-dir: not an absolute path to a directory: $d"
	mkdir -p "$root$(dirname "$d")"
	cp -a "$d" "$root$(dirname "$d")/"
	elves=()
	while IFS= read -r f; do
		magic=""
		LC_ALL=C read -r -N 4 magic <"$f" 2>/dev/null || true
		[[ $magic == $'\x7fELF' ]] && elves+=("$f")
	done < <(find "$d" -type f)
	((${#elves[@]} == 0)) || install_libs "${elves[@]}"
done
# Debian's coreutils ahead of busybox's applets: GNU behaviour, and programs
# that ignore argv[0] (busybox picks the applet by argv[0], so a test that
# execs sleep with a changed Args[0] would otherwise get "applet not found").
core=()
while IFS= read -r f; do
	[[ -f $f && -x $f && ! -L $f && ! -e $root/usr/bin/$(basename "$f") ]] || continue
	install -m 0755 "$f" "$root/usr/bin/$(basename "$f")"
	core+=("$f")
done < <(dpkg -L coreutils 2>/dev/null | grep -E '^/(usr/)?s?bin/[^/]+$')
if ((${#core[@]})); then
	install_libs "${core[@]}"
else
	log "warning: no coreutils programs found (dpkg -L coreutils); busybox applets only"
fi
install -m 0755 "$busybox_bin" "$root/usr/bin/busybox"
# /bin/sh is dash, as on Debian. Busybox's ash would run its own applets
# instead of the programs on PATH (Debian builds it "standalone"), so
# `sh -c 'chmod ...'` would not run coreutils' chmod.
if [[ -x $root/usr/bin/dash ]]; then
	ln -s dash "$root/usr/bin/sh"
fi
for applet in $("$busybox_bin" --list); do
	[[ -e $root/usr/bin/$applet || -L $root/usr/bin/$applet ]] || ln -s busybox "$root/usr/bin/$applet"
done

log "building runas"
(cd "$repo" && CGO_ENABLED=0 go build -trimpath -o "$root/usr/local/bin/runas" ./vmtest/runas) ||
	die "go build ./vmtest/runas failed"
if [[ -n $agentrun ]]; then
	install_prog "$agentrun" /usr/local/bin/agentrun
fi
: >"$root/vmtest/tests"
for i in "${!test_paths[@]}"; do
	name=$(basename "${test_paths[$i]}")
	install_prog "${test_paths[$i]}" "/vmtest/bin/$name"
	echo "$name" >>"$root/vmtest/tests"
	tr ',' '\n' <<<"${test_modes[$i]}" >"$root/vmtest/modes.$name"
done

# Kernel modules, dependencies first. The package ships no modules.dep, so
# dependencies come from each module's own .modinfo "depends=" entry.
declare -A ko_path=() ko_done=()
while IFS= read -r f; do
	n=$(basename "$f")
	n=${n%%.ko*}
	ko_path[${n//-/_}]=$f
done < <(find "$kdir/modules" -name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst')
: >"$root/vmtest/modules"
ko_cat() {
	case $1 in
	*.ko.xz) xz -dc "$1" 2>/dev/null || busybox xz -dc "$1" ;;
	*.ko.zst) zstd -dc "$1" ;;
	*) cat "$1" ;;
	esac
}
add_module() {
	local n=${1//-/_} params=${2:-} f rel dep
	[[ -z ${ko_done[$n]:-} ]] || return 0
	ko_done[$n]=1
	f=${ko_path[$n]:-}
	if [[ -z $f ]]; then
		grep -qE "/${n//_/[-_]}\.ko" "$kdir/modules/modules.builtin" 2>/dev/null && return 0
		die "kernel module $1 is neither built in nor shipped in $pkg"
	fi
	for dep in $(ko_cat "$f" | tr '\0' '\n' | sed -n 's/^depends=//p' | tr ',' ' '); do
		add_module "$dep"
	done
	rel=${f#"$kdir/modules/"}
	rel=${rel%.xz}
	rel=${rel%.zst}
	mkdir -p "$(dirname "$root/lib/modules/$kver/$rel")"
	ko_cat "$f" >"$root/lib/modules/$kver/$rel"
	echo "/lib/modules/$kver/$rel${params:+ $params}" >>"$root/vmtest/modules"
}
if ((systemd)); then
	# The root is a virtio disk; /tmp is on it (ext4, like a Debian host).
	modules+=(virtio_pci virtio_blk)
elif [[ $tmp_fs == ext4 ]]; then
	# /tmp lives on a brd RAM disk; ext4 itself is built in.
	add_module brd "rd_nr=1 rd_size=$((tmp_size * 1024)) max_part=0"
	mke2fs_bin=$(command -v mke2fs || echo /usr/sbin/mke2fs)
	[[ -x $mke2fs_bin ]] || die "mke2fs not found (Debian package e2fsprogs) for --tmp ext4"
	install_prog "$mke2fs_bin" /vmtest/mke2fs
fi
for m in "${modules[@]}"; do
	add_module "$m"
done

# Run configuration, one item per line.
printf '%s\n' "$test_timeout" >"$root/vmtest/test-timeout"
printf '%s\n' "$tmp_fs" >"$root/vmtest/tmp-fs"
printf '%s\n' "${envs[@]}" >"$root/vmtest/env"
printf '%s\n' "${test_args[@]}" >"$root/vmtest/test-args"
for br in "${bin_runs[@]}"; do
	printf '%s\n' "-test.run=${br#*=}" >"$root/vmtest/run.${br%%=*}"
done
if ((systemd)); then
	: >"$root/vmtest/systemd"
fi
install -m 0755 "$here/init.sh" "$root/vmtest/init"
install -m 0755 "$here/stage1.sh" "$stage/init"

cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
artest:x:1000:1000:vmtest unprivileged user:/home/artest:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
tty:x:5:
artest:x:1000:
nogroup:x:65534:
EOF
echo 'artest:100000:65536' >"$root/etc/subuid"
echo 'artest:100000:65536' >"$root/etc/subgid"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tvmtest\n' >"$root/etc/hosts"
echo vmtest >"$root/etc/hostname"
printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files\n' >"$root/etc/nsswitch.conf"
: >"$root/etc/resolv.conf"
printf 'ID=vmtest\nNAME="agentrun vmtest initramfs"\n' >"$root/etc/os-release"

initrd=$work/initramfs.cpio.gz
(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) | gzip -1 >"$initrd.tmp"
mv "$initrd.tmp" "$initrd"
log "initramfs $(du -h "$initrd" | cut -f1) ($((SECONDS - t_start)) s so far)"

# ---- 3. boot and run ----------------------------------------------------------
console=$work/console.log
append="console=ttyS0 cgroup_no_v1=all panic=-1 quiet"
drive=()
if ((systemd)); then
	# snapshot=on: writes go to a temporary file, the cached image stays
	# pristine.
	append+=" systemd.show_status=0 rd.udev.log_level=3 systemd.log_level=warning"
	drive=(-drive "file=$sdimg,format=raw,if=virtio,snapshot=on")
fi
qemu=(qemu-system-x86_64 -accel "$accel" -cpu max -m "$memory" -smp "$smp"
	-display none -monitor none -serial stdio -nic none -no-reboot
	-kernel "$kdir/vmlinuz" -initrd "$initrd" -append "$append" "${drive[@]}")
log "booting: ${qemu[*]}"
log "console: $console (timeout ${timeout}s)"
t_boot=$SECONDS
# --foreground keeps qemu in this script's process group, so Ctrl-C or a
# kill of the whole job reaches it; sed -u strips the serial console's \r
# without buffering, so the log streams.
set +e
timeout --foreground -k 10 "$timeout" "${qemu[@]}" </dev/null 2>&1 | sed -u 's/\r//g' | tee "$console"
qrc=${PIPESTATUS[0]}
set -e
t_vm=$((SECONDS - t_boot))

# ---- 4. verdict -----------------------------------------------------------------
passed=$(grep -c '^VMTEST-RESULT [^ ]* [^ ]* PASS ' "$console" || true)
failed=$(grep -c '^VMTEST-RESULT [^ ]* [^ ]* FAIL ' "$console" || true)
echo
echo "==== vmtest summary (VM ${t_vm}s, total $((SECONDS - t_start))s) ===="
grep '^VMTEST-\(RESULT\|WARN\|FATAL\)' "$console" || true
status=0
if ((qrc == 124 || qrc == 137)); then
	echo "vmtest: FAIL: the VM did not finish within ${timeout}s (killed)"
	status=3
elif ((qrc != 0)); then
	echo "vmtest: FAIL: qemu exited with status $qrc"
	status=3
fi
if ! grep -q '^VMTEST-DONE ' "$console"; then
	echo "vmtest: FAIL: no VMTEST-DONE marker: the VM crashed or was killed before the end (see $console)"
	status=3
fi
if ((passed + failed != expected)); then
	echo "vmtest: FAIL: expected $expected results (binaries x modes), saw $((passed + failed))"
	status=3
fi
if ((failed > 0 && status == 0)); then
	status=1
fi
# Results that never came back count as failed.
nfail=$((expected - passed))
((nfail >= failed)) || nfail=$failed
echo "vmtest: $passed passed, $nfail failed"
exit $status
