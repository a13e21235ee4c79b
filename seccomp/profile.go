package seccomp

import (
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Kernel constants the default profile filters on. They are spelled out here
// rather than taken from x/sys/unix so that profiles can be built and
// inspected on every GOOS; the values are the same on x86_64 and aarch64.
const (
	cloneNewTime   = 0x00000080 // unshare only: on clone this bit is part of the exit signal
	cloneNewNS     = 0x00020000
	cloneNewCgroup = 0x02000000
	cloneNewUTS    = 0x04000000
	cloneNewIPC    = 0x08000000
	cloneNewUser   = 0x10000000
	cloneNewPID    = 0x20000000
	cloneNewNet    = 0x40000000

	afUnix    = 1
	afInet    = 2
	afInet6   = 10
	afNetlink = 16

	netlinkRoute = 0

	ioctlTIOCSTI   = 0x5412
	ioctlTIOCLINUX = 0x541c

	perLinux          = 0x0000000
	perLinux32        = 0x0000008
	perUname26        = 0x0020000
	personalityQuery  = 0xffffffff
	filterNewListener = 0x8 // SECCOMP_FILTER_FLAG_NEW_LISTENER

	errnoEPERM  = uint(syscall.EPERM)
	errnoENOSYS = 38 // ENOSYS on Linux; syscall.ENOSYS differs on other GOOS
)

// cloneNSFlags are the clone(2) flags that create namespaces. CLONE_NEWTIME
// is not among them: clone(2) has no room for it and reads 0x80 as part of
// the exit signal.
func cloneNSFlags() []uint64 {
	return []uint64{cloneNewNS, cloneNewCgroup, cloneNewUTS, cloneNewIPC, cloneNewUser, cloneNewPID, cloneNewNet}
}

// unshareNSFlags are the unshare(2) flags that create namespaces.
func unshareNSFlags() []uint64 {
	return append(cloneNSFlags(), cloneNewTime)
}

// DefaultProfile returns agentrun's default seccomp profile: an allowlist
// sized for agent workloads (shells, coreutils, git, python3, cc, go build,
// make, node, curl).
//
// Syscalls the profile does not name fail with ENOSYS, so a newer syscall
// looks absent and libc falls back to an older one (clone3 is listed
// explicitly for that reason: glibc then uses clone, whose flags can be
// filtered). Known dangerous syscalls fail with EPERM: the keyring, bpf,
// perf_event_open, userfaultfd, io_uring, kexec and modules, every mount
// call old and new, setns and namespace-creating clone/unshare flags,
// open_by_handle_at, swap, reboot, acct, clock setting, iopl/ioperm,
// syslog, quotactl, unusual personalities, socket families other than
// AF_UNIX, AF_INET, AF_INET6 and NETLINK_ROUTE, and the TIOCSTI and
// TIOCLINUX ioctls. seccomp(2) itself is allowed except for filters that ask
// for a notification listener (see NotifyOnDeny for why).
//
// The profile lists x86_64 and aarch64. Compile keeps the architectures the
// running kernel can execute, so on x86_64 the i386 and x32 entry points are
// closed: a 32-bit syscall kills the process.
//
// Each call returns a fresh value that the caller may modify.
func DefaultProfile() *specs.LinuxSeccomp {
	enosys := uint(errnoENOSYS)
	p := &specs.LinuxSeccomp{
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: &enosys,
		Architectures:   []specs.Arch{specs.ArchX86_64, specs.ArchAARCH64},
	}
	add := func(action specs.LinuxSeccompAction, errno uint, names []string, args ...specs.LinuxSeccompArg) {
		sc := specs.LinuxSyscall{Names: names, Action: action, Args: args}
		if action == specs.ActErrno {
			e := errno
			sc.ErrnoRet = &e
		}
		p.Syscalls = append(p.Syscalls, sc)
	}
	allow := func(names []string, args ...specs.LinuxSeccompArg) { add(specs.ActAllow, 0, names, args...) }
	deny := func(names []string, args ...specs.LinuxSeccompArg) { add(specs.ActErrno, errnoEPERM, names, args...) }

	allow(allowedSyscalls())
	deny(deniedSyscalls())
	add(specs.ActErrno, errnoENOSYS, []string{"clone3"})

	// clone and unshare: allowed while no namespace flag is set, EPERM for
	// each namespace flag. The two sets are disjoint, so libseccomp's rule
	// order cannot matter.
	allow([]string{"clone"}, maskedEq(0, or(cloneNSFlags()), 0))
	for _, f := range cloneNSFlags() {
		deny([]string{"clone"}, maskedEq(0, f, f))
	}
	allow([]string{"unshare"}, maskedEq(0, or(unshareNSFlags()), 0))
	for _, f := range unshareNSFlags() {
		deny([]string{"unshare"}, maskedEq(0, f, f))
	}

	// socket: the kernel reads the family and protocol as 32-bit ints, so
	// every comparison masks the upper half of the register; the allowed and
	// denied sets are exact complements within the low 32 bits.
	families := []uint32{afUnix, afInet, afInet6, afNetlink}
	for _, fam := range families[:3] {
		allow([]string{"socket"}, maskedEq(0, 0xffffffff, uint64(fam)))
	}
	allow([]string{"socket"}, maskedEq(0, 0xffffffff, afNetlink), maskedEq(2, 0xffffffff, netlinkRoute))
	deny([]string{"socket"}, complementArgs(0, families)...)
	for _, c := range complement32([]uint32{netlinkRoute}) {
		deny([]string{"socket"}, maskedEq(0, 0xffffffff, afNetlink), maskedEq(2, uint64(c.mask), uint64(c.value)))
	}

	// ioctl: TIOCSTI and TIOCLINUX (masked: the request is an unsigned int,
	// and a sign-extended request must not slip through) are denied,
	// everything else is allowed. libseccomp cannot combine an unconditional
	// allow with a conditional deny, hence the complement.
	ttyInject := []uint32{ioctlTIOCSTI, ioctlTIOCLINUX}
	for _, req := range ttyInject {
		deny([]string{"ioctl"}, maskedEq(1, 0xffffffff, uint64(req)))
	}
	allow([]string{"ioctl"}, complementArgs(1, ttyInject)...)

	// personality: the Linux persona, PER_LINUX32 (uname reports i686),
	// UNAME26, their combination and the query value; everything else
	// (READ_IMPLIES_EXEC, MMAP_PAGE_ZERO, ADDR_NO_RANDOMIZE, foreign
	// personas) is denied.
	personas := []uint32{perLinux, perLinux32, perUname26, perUname26 | perLinux32, personalityQuery}
	for _, v := range personas {
		allow([]string{"personality"}, maskedEq(0, 0xffffffff, uint64(v)))
	}
	deny([]string{"personality"}, complementArgs(0, personas)...)

	// Mode arguments: no setuid or setgid bit on any file the sandbox makes
	// or changes. In root mode a workspace owned by root is idmapped to the
	// sandbox user, so without this the sandbox could leave a root-owned
	// setuid binary on the host.
	for _, m := range modeArgs() {
		allow([]string{m.name}, maskedEq(m.index, sSetid, 0))
		deny([]string{m.name}, maskedEq(m.index, sISUID, sISUID))
		deny([]string{m.name}, maskedEq(m.index, sISGID, sISGID))
	}
	// openat2 carries its mode behind a pointer that a filter cannot read;
	// ENOSYS makes libc and runtimes fall back to openat, which is checked.
	add(specs.ActErrno, errnoENOSYS, []string{"openat2"})

	// seccomp: stacking further filters only restricts, so it is allowed,
	// but not with a listener of its own (see NotifyOnDeny).
	allow([]string{"seccomp"}, maskedEq(1, filterNewListener, 0))
	deny([]string{"seccomp"}, maskedEq(1, filterNewListener, filterNewListener))
	return p
}

// allowedSyscalls are allowed unconditionally. Names that one architecture
// lacks (open on aarch64) or that the installed libseccomp does not know yet
// (newer syscalls) are skipped by Compile, the latter reported in
// Program.Skipped.
func allowedSyscalls() []string {
	return []string{
		"accept", "accept4", "access", "alarm", "arch_prctl", "bind", "brk",
		"cachestat", "capget", "capset", "chdir", "chown", "chroot",
		"clock_getres", "clock_gettime", "clock_nanosleep", "close", "close_range",
		"connect", "copy_file_range", "dup", "dup2", "dup3",
		"epoll_create", "epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_pwait2",
		"epoll_wait", "eventfd", "eventfd2", "execve", "execveat", "exit", "exit_group",
		"faccessat", "faccessat2", "fadvise64", "fallocate", "fanotify_mark",
		"fchdir", "fchown", "fchownat", "fcntl",
		"fdatasync", "fgetxattr", "file_getattr", "file_setattr", "flistxattr", "flock",
		"fork", "fremovexattr", "fsetxattr", "fstat", "fstatfs", "fsync", "ftruncate",
		"futex", "futex_requeue", "futex_wait", "futex_waitv", "futex_wake", "futimesat",
		"get_mempolicy", "get_robust_list", "get_thread_area", "getcpu", "getcwd",
		"getdents", "getdents64", "getegid", "geteuid", "getgid", "getgroups",
		"getitimer", "getpeername", "getpgid", "getpgrp", "getpid", "getppid",
		"getpriority", "getrandom", "getresgid", "getresuid", "getrlimit", "getrusage",
		"getsid", "getsockname", "getsockopt", "gettid", "gettimeofday", "getuid",
		"getxattr", "getxattrat", "inotify_add_watch", "inotify_init", "inotify_init1",
		"inotify_rm_watch", "io_cancel", "io_destroy", "io_getevents", "io_pgetevents",
		"io_setup", "io_submit", "ioprio_get", "ioprio_set", "kill",
		"landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self",
		"lchown", "lgetxattr", "link", "linkat", "listen", "listmount", "listxattr",
		"listxattrat", "llistxattr", "lremovexattr", "lseek", "lsetxattr",
		"lsm_get_self_attr", "lsm_list_modules", "lsm_set_self_attr", "lstat",
		"madvise", "map_shadow_stack", "mbind", "membarrier", "memfd_create",
		"memfd_secret", "mincore", "mkdir", "mkdirat", "mlock",
		"mlock2", "mlockall", "mmap", "mprotect", "mq_getsetattr", "mq_notify",
		"mq_open", "mq_timedreceive", "mq_timedsend", "mq_unlink", "mremap", "mseal",
		"msgctl", "msgget", "msgrcv", "msgsnd", "msync", "munlock", "munlockall",
		"munmap", "name_to_handle_at", "nanosleep", "newfstatat",
		"pause", "pidfd_getfd", "pidfd_open", "pidfd_send_signal", "pipe",
		"pipe2", "pkey_alloc", "pkey_free", "pkey_mprotect", "poll", "ppoll", "prctl",
		"pread64", "preadv", "preadv2", "prlimit64", "process_madvise",
		"process_mrelease", "process_vm_readv", "process_vm_writev", "pselect6",
		"ptrace", "pwrite64", "pwritev", "pwritev2", "read", "readahead", "readlink",
		"readlinkat", "readv", "recvfrom", "recvmmsg", "recvmsg", "remap_file_pages",
		"removexattr", "removexattrat", "rename", "renameat", "renameat2",
		"restart_syscall", "rmdir", "rseq", "rt_sigaction", "rt_sigpending",
		"rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend",
		"rt_sigtimedwait", "rt_tgsigqueueinfo", "sched_get_priority_max",
		"sched_get_priority_min", "sched_getaffinity", "sched_getattr",
		"sched_getparam", "sched_getscheduler", "sched_rr_get_interval",
		"sched_setaffinity", "sched_setattr", "sched_setparam", "sched_setscheduler",
		"sched_yield", "select", "semctl", "semget", "semop", "semtimedop", "sendfile",
		"sendmmsg", "sendmsg", "sendto", "set_mempolicy", "set_mempolicy_home_node",
		"set_robust_list", "set_thread_area", "set_tid_address", "setdomainname",
		"setfsgid", "setfsuid", "setgid", "setgroups", "sethostname", "setitimer",
		"setpgid", "setpriority", "setregid", "setresgid", "setresuid", "setreuid",
		"setrlimit", "setsid", "setsockopt", "setuid", "setxattr", "setxattrat",
		"shmat", "shmctl", "shmdt", "shmget", "shutdown", "sigaltstack", "signalfd",
		"signalfd4", "socketpair", "splice", "stat", "statfs", "statmount", "statx",
		"symlink", "symlinkat", "sync", "sync_file_range", "syncfs", "sysinfo", "tee",
		"tgkill", "time", "timer_create", "timer_delete", "timer_getoverrun",
		"timer_gettime", "timer_settime", "timerfd_create", "timerfd_gettime",
		"timerfd_settime", "times", "tkill", "truncate", "umask", "uname", "unlink",
		"unlinkat", "uretprobe", "utime", "utimensat", "utimes", "vfork", "vmsplice",
		"wait4", "waitid", "write", "writev",
	}
}

// deniedSyscalls fail with EPERM (or are reported, see NotifyOnDeny): the
// calls the threat model names, plus other privileged calls whose failure a
// program should read as "not permitted" rather than "not implemented".
func deniedSyscalls() []string {
	return []string{
		// kernel keyring: not namespaced
		"add_key", "keyctl", "request_key",
		// kernel attack surface
		"bpf", "perf_event_open", "userfaultfd",
		"io_uring_enter", "io_uring_register", "io_uring_setup",
		// kernel replacement and modules
		"kexec_file_load", "kexec_load", "init_module", "finit_module", "delete_module",
		// mounts, old and new API
		"mount", "umount", "umount2", "pivot_root", "open_tree", "open_tree_attr",
		"move_mount", "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr",
		// joining namespaces
		"setns",
		// file handles bypass path checks (the "shocker" escape)
		"open_by_handle_at",
		// host administration
		"swapon", "swapoff", "reboot", "acct", "syslog", "quotactl", "quotactl_fd",
		"vhangup", "lookup_dcookie", "fanotify_init",
		// clocks
		"settimeofday", "stime", "clock_settime", "adjtimex", "clock_adjtime",
		// raw hardware and legacy x86
		"iopl", "ioperm", "modify_ldt",
		// cross-process memory and kernel pointer probes
		"kcmp", "migrate_pages", "move_pages",
	}
}

// File mode bits that grant privilege on execution.
const (
	sISUID = 0o4000
	sISGID = 0o2000
	sSetid = sISUID | sISGID
)

// modeArgs gives, in a fixed order (the profile hash depends on it), the
// argument that holds a file mode for the calls that create files or
// change modes.
func modeArgs() []struct {
	name  string
	index uint
} {
	return []struct {
		name  string
		index uint
	}{
		{"chmod", 1}, {"fchmod", 1}, {"fchmodat", 2}, {"fchmodat2", 2},
		{"creat", 1}, {"open", 2}, {"openat", 3}, {"mknod", 1}, {"mknodat", 2},
	}
}

func or(flags []uint64) uint64 {
	var m uint64
	for _, f := range flags {
		m |= f
	}
	return m
}

func maskedEq(index uint, mask, value uint64) specs.LinuxSeccompArg {
	return specs.LinuxSeccompArg{Index: index, Value: mask, ValueTwo: value, Op: specs.OpMaskedEqual}
}

// complementArgs returns masked comparisons on one argument that together
// (OCI semantics: several comparisons on the same index are alternatives)
// match exactly the 32-bit values not in excluded.
func complementArgs(index uint, excluded []uint32) []specs.LinuxSeccompArg {
	cs := complement32(excluded)
	args := make([]specs.LinuxSeccompArg, 0, len(cs))
	for _, c := range cs {
		args = append(args, maskedEq(index, uint64(c.mask), uint64(c.value)))
	}
	return args
}

type maskValue struct{ mask, value uint32 }

// complement32 returns (mask, value) pairs whose matches (x&mask == value)
// are pairwise disjoint and together cover exactly the 32-bit values that are
// not in excluded. It walks the binary trie of the excluded values from the
// top bit and emits every subtree that holds none of them; that takes at most
// 32 pairs per excluded value.
func complement32(excluded []uint32) []maskValue {
	var out []maskValue
	var walk func(prefix uint32, depth int, set []uint32)
	walk = func(prefix uint32, depth int, set []uint32) {
		if depth == 32 {
			return // prefix is an excluded value
		}
		bit := uint32(1) << (31 - depth)
		mask := ^uint32(0) << (31 - depth)
		var zeros, ones []uint32
		for _, v := range set {
			if v&bit != 0 {
				ones = append(ones, v)
			} else {
				zeros = append(zeros, v)
			}
		}
		for _, side := range [2]struct {
			prefix uint32
			set    []uint32
		}{{prefix, zeros}, {prefix | bit, ones}} {
			if len(side.set) == 0 {
				out = append(out, maskValue{mask, side.prefix})
			} else {
				walk(side.prefix, depth+1, side.set)
			}
		}
	}
	if len(excluded) == 0 {
		return []maskValue{{0, 0}}
	}
	walk(0, 0, excluded)
	return out
}
