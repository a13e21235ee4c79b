#!/usr/bin/busybox sh
# vmtest stage 2: PID 1 on the tmpfs root (installed as /vmtest/init).
#
# Sets up a pure cgroup v2 system, then runs every test binary listed in
# /vmtest/tests once per mode in /vmtest/modes.NAME, printing markers that
# vmtest/run.sh reads off the serial console:
#
#   VMTEST-BEGIN <mode> <test>
#   VMTEST-RESULT <mode> <test> PASS|FAIL rc=<exit code> secs=<seconds>
#   VMTEST-WARN <mode> <test> <what was left behind>
#   VMTEST-DONE pass=<n> fail=<n>
#
# and powers off. No `set -e`: PID 1 must reach poweroff whatever happens
# (if it exits instead, the kernel panics, qemu exits without VMTEST-DONE and
# run.sh fails the run, which is also safe).
#
# Under systemd (run.sh --systemd; VMTEST_SYSTEMD=1, started by
# vmtest.service) systemd has done the mounts and the cgroup tree, so the
# set-up below is skipped; the runner waits for artest's user manager
# instead.

export PATH=/usr/local/bin:/usr/bin:/usr/sbin:/bin:/sbin
CG=/sys/fs/cgroup
USER_UID=1000
USER_GID=1000
USER_NAME=artest
DELEGATED=$CG/user-$USER_UID
NODELEG=$CG/nodeleg-$USER_UID

say() { printf '\n%s\n' "$*"; }
fatal() {
	say "VMTEST-FATAL $*"
	sync
	poweroff -f
}

# setup: PID 1's mounts, modules, /tmp and cgroup tree (the busybox VM).
setup() {
# ---- mounts -----------------------------------------------------------------
mount -t proc -o nosuid,nodev,noexec proc /proc || fatal "mount proc"
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys || fatal "mount sysfs"
[ -e /dev/null ] || mount -t devtmpfs devtmpfs /dev || fatal "mount devtmpfs"
mkdir -p /dev/pts /dev/shm /dev/mqueue
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts /dev/pts
ln -sf pts/ptmx /dev/ptmx 2>/dev/null
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs /dev/shm
mount -t mqueue mqueue /dev/mqueue
# Mounted the way systemd mounts it on a unified host.
mount -t cgroup2 -o nosuid,nodev,noexec,nsdelegate,memory_recursiveprot cgroup2 $CG ||
	mount -t cgroup2 -o nosuid,nodev,noexec,nsdelegate cgroup2 $CG || fatal "mount cgroup2"
mount -t tmpfs -o nosuid,nodev,mode=0755 tmpfs /run || fatal "mount /run"
mkdir -p /run/user/$USER_UID /run/lock
chown $USER_UID:$USER_GID /run/user/$USER_UID
chmod 0700 /run/user/$USER_UID
chown -R $USER_UID:$USER_GID /home/$USER_NAME
mount -t securityfs securityfs /sys/kernel/security 2>/dev/null
mount -t bpf bpf /sys/fs/bpf 2>/dev/null
hostname vmtest
ip link set lo up

# ---- kernel modules (load order resolved by run.sh) -------------------------
if [ -s /vmtest/modules ]; then
	while IFS= read -r ko; do
		# unquoted on purpose: a line is "path [param=value...]"
		# shellcheck disable=SC2086
		insmod $ko || say "VMTEST-WARN - - insmod $ko failed"
	done </vmtest/modules
fi

# ---- /tmp: ext4 on a RAM disk (brd, loaded above) or tmpfs -------------------
# Files run.sh placed under /tmp (--host-bin SRC:/tmp/x) survive the mount.
if [ -n "$(ls -A /tmp)" ]; then
	mv /tmp /vmtest/tmp-seed && mkdir -m 1777 /tmp
fi
if [ "$(cat /vmtest/tmp-fs)" = ext4 ]; then
	/vmtest/mke2fs -q -F -t ext4 -m 0 -E lazy_itable_init=1,lazy_journal_init=1 /dev/ram0 >/dev/null ||
		fatal "mke2fs /dev/ram0"
	mount -t ext4 -o nosuid,nodev,noinit_itable /dev/ram0 /tmp || fatal "mount ext4 /tmp"
	rmdir /tmp/lost+found 2>/dev/null
else
	mount -t tmpfs -o nosuid,nodev tmpfs /tmp || fatal "mount /tmp"
fi
chmod 1777 /tmp
if [ -d /vmtest/tmp-seed ]; then
	cp -a /vmtest/tmp-seed/. /tmp/ && rm -rf /vmtest/tmp-seed
	chmod 1777 /tmp
fi

# ---- cgroups: every controller enabled for the root's children --------------
# shellcheck disable=SC2013 # one line of words
for c in $(cat $CG/cgroup.controllers); do
	echo "+$c" >$CG/cgroup.subtree_control || say "VMTEST-WARN - - cannot enable $c"
done

}

# wait_user_manager: under systemd, artest's user manager (started at boot
# through lingering) must answer on its private socket before tests run.
wait_user_manager() {
	i=0
	while [ $i -lt 600 ]; do
		if [ -S /run/user/$USER_UID/systemd/private ] && systemctl is-active -q user@$USER_UID.service; then
			return 0
		fi
		sleep 0.2
		i=$((i + 1))
	done
	fatal "user@$USER_UID.service did not come up: $(systemctl status user@$USER_UID.service 2>&1 | tr '\n' ' ')"
}

if [ "${VMTEST_SYSTEMD:-}" = 1 ]; then
	wait_user_manager
else
	setup
fi

# rm_cgroup DIR: kill everything in DIR and remove it with all its children.
rm_cgroup() {
	[ -d "$1" ] || return 0
	echo 1 >"$1/cgroup.kill" 2>/dev/null
	i=0
	while grep -q '^populated 1' "$1/cgroup.events" 2>/dev/null && [ $i -lt 50 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	find "$1" -depth -type d -exec rmdir {} \; 2>/dev/null
	[ ! -d "$1" ]
}

# list_cgroups: every cgroup directory below the root, one per line, but for
# the per-test ones the harness creates (and removes) itself.
list_cgroups() {
	find $CG -mindepth 1 -type d | grep -v -e "^$DELEGATED\(/\|\$\)" -e "^$NODELEG\(/\|\$\)" | sort
}

# ---- environment summary ----------------------------------------------------
say "VMTEST-INFO kernel $(uname -r)"
say "VMTEST-INFO cmdline $(cat /proc/cmdline)"
say "VMTEST-INFO controllers $(cat $CG/cgroup.controllers)"
say "VMTEST-INFO subtree_control $(cat $CG/cgroup.subtree_control)"
say "VMTEST-INFO unprivileged_userns_clone $(cat /proc/sys/kernel/unprivileged_userns_clone 2>/dev/null || echo n/a) max_user_namespaces $(cat /proc/sys/user/max_user_namespaces)"
say "VMTEST-INFO modules $(cut -d' ' -f1 /proc/modules | tr '\n' ' ')"
say "VMTEST-INFO tmp $(grep ' /tmp ' /proc/mounts)"
say "VMTEST-INFO memory $(grep MemTotal /proc/meminfo) cpus $(nproc)"

# Keep kernel chatter (OOM reports, segfault notices) off the console so it
# cannot split a marker line; it is dumped after the results on failure.
echo 1 >/proc/sys/kernel/printk

# ---- run the tests ----------------------------------------------------------
TEST_TIMEOUT=$(cat /vmtest/test-timeout)
pass=0
fail=0

# run_test MODE NAME
run_test() {
	mode=$1
	name=$2
	case $mode in
	root)
		uid=0 gid=0 home=/root user=root cgroup=
		;;
	user)
		uid=$USER_UID gid=$USER_GID home=/home/$USER_NAME user=$USER_NAME cgroup=$DELEGATED
		# A fresh delegated cgroup for every test, owned the way systemd
		# hands out Delegate=yes units: the directory and the three files
		# that move processes and enable controllers.
		rm_cgroup $DELEGATED || say "VMTEST-WARN $mode $name cannot remove stale $DELEGATED"
		mkdir $DELEGATED
		chown $uid:$gid $DELEGATED $DELEGATED/cgroup.procs $DELEGATED/cgroup.subtree_control $DELEGATED/cgroup.threads
		;;
	user-nodeleg)
		uid=$USER_UID gid=$USER_GID home=/home/$USER_NAME user=$USER_NAME cgroup=$NODELEG
		rm_cgroup $NODELEG
		mkdir $NODELEG
		;;
	user-systemd)
		# Stays in vmtest.service's cgroup, which root owns: no
		# delegation, but a user manager that can hand out scopes.
		uid=$USER_UID gid=$USER_GID home=/home/$USER_NAME user=$USER_NAME cgroup=
		;;
	*)
		say "VMTEST-RESULT $mode $name FAIL rc=unknown-mode secs=0"
		fail=$((fail + 1))
		return
		;;
	esac

	own_cg=$CG
	if [ -z "$cgroup" ] && [ "${VMTEST_SYSTEMD:-}" = 1 ]; then
		own_cg=$CG$(sed -n 's/^0:://p' /proc/self/cgroup)
	fi
	wd=/vmtest/run/$name.$mode
	mkdir -p "$wd"
	chown "$uid:$gid" "$wd"
	# (the extra line: busybox grep -f with an empty file matches nothing)
	{ echo /-; list_cgroups; } >/vmtest/cgroups.before

	# Environment: nothing from PID 1; VMTEST* tell the test where it is.
	set -- env -i \
		PATH=/usr/local/bin:/usr/bin:/usr/sbin:/bin:/sbin \
		HOME=$home USER=$user LOGNAME=$user SHELL=/bin/sh \
		LANG=C.UTF-8 TERM=dumb TMPDIR=/tmp \
		VMTEST=1 VMTEST_MODE="$mode" VMTEST_UID="$uid" VMTEST_CGROUP="${cgroup:-$own_cg}" \
		VMTEST_USER_UID=$USER_UID VMTEST_USER_NAME=$USER_NAME
	[ -x /usr/local/bin/agentrun ] && set -- "$@" AGENTRUN_BIN=/usr/local/bin/agentrun
	[ $uid -ne 0 ] && set -- "$@" XDG_RUNTIME_DIR=/run/user/$uid
	while IFS= read -r kv; do
		[ -n "$kv" ] && set -- "$@" "$kv"
	done </vmtest/env
	set -- "$@" /usr/local/bin/runas -uid $uid -gid $gid
	[ -n "$cgroup" ] && set -- "$@" -cgroup "$cgroup"
	set -- "$@" -- "/vmtest/bin/$name" -test.v -test.timeout="$TEST_TIMEOUT"
	while IFS= read -r a; do
		[ -n "$a" ] && set -- "$@" "$a"
	done </vmtest/test-args
	if [ -f "/vmtest/run.$name" ]; then
		set -- "$@" "$(cat "/vmtest/run.$name")"
	fi

	say "VMTEST-BEGIN $mode $name"
	start=$(date +%s)
	(cd "$wd" && exec "$@" </dev/null)
	rc=$?
	secs=$(($(date +%s) - start))

	# What the test left behind is reported, then cleaned so the next test
	# starts from the same state.
	if [ -n "$cgroup" ]; then
		if grep -q '^populated 1' $cgroup/cgroup.events; then
			say "VMTEST-WARN $mode $name processes left in $cgroup: $(find $cgroup -name cgroup.procs -exec cat {} + | tr '\n' ' ')"
		fi
		left=$(find $cgroup -mindepth 1 -type d | tr '\n' ' ')
		[ -n "$left" ] && say "VMTEST-WARN $mode $name cgroups left: $left"
		rm_cgroup $cgroup || say "VMTEST-WARN $mode $name cannot remove $cgroup"
	fi
	# Outside the harness's own cgroups (a root test's): reported only.
	# Under systemd other units come and go, so only agentrun's count.
	if [ "${VMTEST_SYSTEMD:-}" = 1 ]; then
		# A sandbox's scope must be gone once its runtime is, and it
		# must have been stopped, not left to the manager's garbage
		# collection: both fail the test.
		sleep 1
		left=$(find $CG -name 'agentrun*' -type d | tr '\n' ' ')
		units=$(runas -uid $USER_UID -gid $USER_GID -- env XDG_RUNTIME_DIR=/run/user/$USER_UID \
			systemctl --user list-units --all --plain --no-legend 'agentrun-*' 2>&1 | tr '\n' ' ')
		if [ -n "$left$units" ]; then
			say "VMTEST-WARN $mode $name left behind: cgroups: ${left:-none}; units: ${units:-none}"
			[ $rc -eq 0 ] && rc=1
		fi
	else
		left=$(list_cgroups | grep -vxF -f /vmtest/cgroups.before | tr '\n' ' ')
		[ -n "$left" ] && say "VMTEST-WARN $mode $name cgroups left: $left"
	fi

	if [ $rc -eq 0 ]; then
		result=PASS
		pass=$((pass + 1))
	else
		result=FAIL
		fail=$((fail + 1))
	fi
	say "VMTEST-RESULT $mode $name $result rc=$rc secs=$secs"
}

# Names and modes are checked by run.sh: no blanks, no glob characters.
# shellcheck disable=SC2013
for name in $(cat /vmtest/tests); do
	# shellcheck disable=SC2013
	for mode in $(cat "/vmtest/modes.$name"); do
		run_test "$mode" "$name"
	done
done

say "VMTEST-DONE pass=$pass fail=$fail"
if [ $fail -ne 0 ]; then
	say "VMTEST-DMESG-BEGIN"
	dmesg | tail -n 200
	say "VMTEST-DMESG-END"
fi
sync
poweroff -f
