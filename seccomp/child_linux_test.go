//go:build linux && cgo

package seccomp

// The test binary doubles as the filtered child: TestMain sees
// AGENTRUN_SECCOMP_TEST_MODE, loads the program named by
// AGENTRUN_SECCOMP_TEST_PROG on its locked main thread, and runs one mode.
// Nothing here runs filtered in the test process itself.

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/agentrun/agentrun/internal/abiprobe"
	"golang.org/x/sys/unix"
)

const (
	envMode  = "AGENTRUN_SECCOMP_TEST_MODE"
	envProg  = "AGENTRUN_SECCOMP_TEST_PROG"
	envFlags = "AGENTRUN_SECCOMP_TEST_FLAGS"
	envProg2 = "AGENTRUN_SECCOMP_TEST_PROG2" // nested filter (shadow modes)
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envMode); mode != "" {
		os.Exit(childMain(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// probe is one syscall attempt made under the filter.
type probe struct {
	name string
	// want: "EPERM" or "ENOSYS" (exact errno), "0" (success), or
	// "allowed" (the filter let it through: anything but EPERM/ENOSYS).
	want string
	call func() unix.Errno
}

// sysArgs converts probe arguments. Pointers are kept as unsafe.Pointer in
// the probe closures until the call, so that what they point to stays alive
// (and on the heap) until then.
func sysArgs(args []any) (a [6]uintptr) {
	for i, v := range args {
		switch v := v.(type) {
		case uintptr:
			a[i] = v
		case int:
			a[i] = uintptr(v)
		case unsafe.Pointer:
			a[i] = uintptr(v)
		default:
			panic(fmt.Sprintf("probe argument %T", v))
		}
	}
	return a
}

func sys(nr uintptr, args ...any) func() unix.Errno {
	return func() unix.Errno {
		a := sysArgs(args)
		_, _, e := unix.Syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5])
		runtime.KeepAlive(args)
		return e
	}
}

// sysClose is sys for calls that return an fd on success.
func sysClose(nr uintptr, args ...any) func() unix.Errno {
	return func() unix.Errno {
		a := sysArgs(args)
		r, _, e := unix.Syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5])
		runtime.KeepAlive(args)
		if e == 0 {
			unix.Close(int(r))
		}
		return e
	}
}

func neg(v int) uintptr { return uintptr(v) } // -1 as an fd or a keyring id

// rawClone calls clone(2) directly. If the filter failed to deny it, the
// child exits at once with a raw exit_group.
func rawClone(flags uintptr) func() unix.Errno {
	return func() unix.Errno {
		pid, _, e := unix.RawSyscall6(unix.SYS_CLONE, flags|uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
		if e != 0 {
			return e
		}
		if pid == 0 {
			unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
		}
		var ws unix.WaitStatus
		unix.Wait4(int(pid), &ws, 0, nil)
		return 0
	}
}

func cstr(s string) unsafe.Pointer {
	b, _ := unix.BytePtrFromString(s)
	return unsafe.Pointer(b)
}

// probes are arch-neutral; archProbes adds per-architecture ones.
func probes() []probe {
	const hi uintptr = 0xffffffff00000000
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		pipe = [2]int{0, 1}
	}
	ioctlPtr := unsafe.Pointer(new(int32))
	termios := unsafe.Pointer(new([64]byte))
	actionAllow := new(uint32)
	*actionAllow = unix.SECCOMP_RET_ALLOW
	ps := []probe{
		// keyring
		{"keyctl", "EPERM", sys(unix.SYS_KEYCTL, 0 /* GET_KEYRING_ID */, neg(-3), 0)},
		{"add_key", "EPERM", sys(unix.SYS_ADD_KEY, 0, 0, 0, 0, 0)},
		{"request_key", "EPERM", sys(unix.SYS_REQUEST_KEY, 0, 0, 0, 0)},
		// attack surface
		{"bpf", "EPERM", sys(unix.SYS_BPF, 5 /* PROG_LOAD */, 0, 0)},
		{"perf_event_open", "EPERM", sys(unix.SYS_PERF_EVENT_OPEN, 0, 0, neg(-1), neg(-1), 0)},
		{"userfaultfd", "EPERM", sysClose(unix.SYS_USERFAULTFD, 0)},
		{"io_uring_setup", "EPERM", sysClose(unix.SYS_IO_URING_SETUP, 1, 0)},
		{"io_uring_enter", "EPERM", sys(unix.SYS_IO_URING_ENTER, neg(-1), 0, 0, 0, 0, 0)},
		{"io_uring_register", "EPERM", sys(unix.SYS_IO_URING_REGISTER, neg(-1), 0, 0, 0)},
		// kernel and modules
		{"kexec_load", "EPERM", sys(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0)},
		{"kexec_file_load", "EPERM", sys(unix.SYS_KEXEC_FILE_LOAD, neg(-1), neg(-1), 0, 0, 0)},
		{"init_module", "EPERM", sys(unix.SYS_INIT_MODULE, 0, 0, 0)},
		{"finit_module", "EPERM", sys(unix.SYS_FINIT_MODULE, neg(-1), 0, 0)},
		{"delete_module", "EPERM", sys(unix.SYS_DELETE_MODULE, 0, 0)},
		// mounts
		{"mount", "EPERM", sys(unix.SYS_MOUNT, 0, 0, 0, 0, 0)},
		{"umount2", "EPERM", sys(unix.SYS_UMOUNT2, cstr("/nonexistent"), 0)},
		{"pivot_root", "EPERM", sys(unix.SYS_PIVOT_ROOT, 0, 0)},
		{"open_tree", "EPERM", sysClose(unix.SYS_OPEN_TREE, neg(-1), 0, 0)},
		{"move_mount", "EPERM", sys(unix.SYS_MOVE_MOUNT, neg(-1), 0, neg(-1), 0, 0)},
		{"fsopen", "EPERM", sysClose(unix.SYS_FSOPEN, 0, 0)},
		{"fsmount", "EPERM", sysClose(unix.SYS_FSMOUNT, neg(-1), 0, 0)},
		{"fsconfig", "EPERM", sys(unix.SYS_FSCONFIG, neg(-1), 0, 0, 0, 0)},
		{"fspick", "EPERM", sysClose(unix.SYS_FSPICK, neg(-1), 0, 0)},
		{"mount_setattr", "EPERM", sys(unix.SYS_MOUNT_SETATTR, neg(-1), 0, 0, 0, 0)},
		// namespaces
		{"unshare(CLONE_NEWUSER)", "EPERM", sys(unix.SYS_UNSHARE, unix.CLONE_NEWUSER)},
		{"unshare(CLONE_NEWNS)", "EPERM", sys(unix.SYS_UNSHARE, unix.CLONE_NEWNS)},
		{"unshare(CLONE_NEWNET)", "EPERM", sys(unix.SYS_UNSHARE, unix.CLONE_NEWNET)},
		{"unshare(CLONE_NEWTIME)", "EPERM", sys(unix.SYS_UNSHARE, unix.CLONE_NEWTIME)},
		{"unshare(CLONE_FS)", "0", sys(unix.SYS_UNSHARE, unix.CLONE_FS)},
		{"setns", "EPERM", sys(unix.SYS_SETNS, neg(-1), 0)},
		{"clone(CLONE_NEWUSER)", "EPERM", rawClone(unix.CLONE_NEWUSER)},
		{"clone(CLONE_NEWPID)", "EPERM", rawClone(unix.CLONE_NEWPID)},
		{"clone(CLONE_NEWNET|CLONE_NEWNS)", "EPERM", rawClone(unix.CLONE_NEWNET | unix.CLONE_NEWNS)},
		{"clone(fork)", "0", rawClone(0)},
		{"clone3", "ENOSYS", sys(unix.SYS_CLONE3, 0, 0)},
		// host administration
		{"open_by_handle_at", "EPERM", sysClose(unix.SYS_OPEN_BY_HANDLE_AT, neg(-1), 0, 0)},
		{"swapon", "EPERM", sys(unix.SYS_SWAPON, 0, 0)},
		{"swapoff", "EPERM", sys(unix.SYS_SWAPOFF, 0)},
		{"reboot", "EPERM", sys(unix.SYS_REBOOT, 0, 0, 0, 0)}, // bad magic: EINVAL if it ever got through
		{"acct", "EPERM", sys(unix.SYS_ACCT, 0)},
		{"settimeofday", "EPERM", sys(unix.SYS_SETTIMEOFDAY, 0, 0)},
		{"clock_settime", "EPERM", sys(unix.SYS_CLOCK_SETTIME, 12345, 0)},
		{"adjtimex", "EPERM", sys(unix.SYS_ADJTIMEX, 0)},
		{"clock_adjtime", "EPERM", sys(unix.SYS_CLOCK_ADJTIME, 12345, 0)},
		{"syslog", "EPERM", sys(unix.SYS_SYSLOG, 10 /* SIZE_BUFFER */, 0, 0)},
		{"quotactl", "EPERM", sys(unix.SYS_QUOTACTL, 0, 0, 0, 0)},
		{"quotactl_fd", "EPERM", sys(unix.SYS_QUOTACTL_FD, neg(-1), 0, 0, 0)},
		{"kcmp", "EPERM", sys(unix.SYS_KCMP, 0, 0, 0, 0, 0)},
		{"move_pages", "EPERM", sys(unix.SYS_MOVE_PAGES, 0, 0, 0, 0, 0, 0)},
		{"fanotify_init", "EPERM", sysClose(unix.SYS_FANOTIFY_INIT, 0, 0)},
		// sockets
		{"socket(AF_PACKET)", "EPERM", sysClose(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW, 0)},
		{"socket(AF_PACKET, upper bits set)", "EPERM", sysClose(unix.SYS_SOCKET, hi|unix.AF_PACKET, unix.SOCK_RAW, 0)},
		{"socket(AF_KEY)", "EPERM", sysClose(unix.SYS_SOCKET, unix.AF_KEY, unix.SOCK_RAW, 2)},
		{"socket(AF_VSOCK)", "EPERM", sysClose(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0)},
		{"socket(AF_ALG)", "EPERM", sysClose(unix.SYS_SOCKET, unix.AF_ALG, unix.SOCK_SEQPACKET, 0)},
		{"socket(AF_NETLINK, NETLINK_AUDIT)", "EPERM", sysClose(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT)},
		{"socket(AF_NETLINK, NETLINK_SOCK_DIAG)", "EPERM", sysClose(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_SOCK_DIAG)},
		{"socket(AF_NETLINK, NETLINK_ROUTE)", "0", sysClose(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE)},
		{"socket(AF_UNIX)", "0", sysClose(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0)},
		{"socket(AF_INET)", "0", sysClose(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM, 0)},
		{"socket(AF_INET, upper bits set)", "allowed", sysClose(unix.SYS_SOCKET, hi|unix.AF_INET, unix.SOCK_DGRAM, 0)},
		{"socket(AF_INET6)", "allowed", sysClose(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM, 0)},
		// terminal injection
		{"ioctl(TIOCSTI)", "EPERM", sys(unix.SYS_IOCTL, uintptr(pipe[0]), unix.TIOCSTI, ioctlPtr)},
		{"ioctl(TIOCSTI, upper bits set)", "EPERM", sys(unix.SYS_IOCTL, uintptr(pipe[0]), hi|unix.TIOCSTI, ioctlPtr)},
		{"ioctl(TIOCLINUX)", "EPERM", sys(unix.SYS_IOCTL, uintptr(pipe[0]), unix.TIOCLINUX, ioctlPtr)},
		{"ioctl(FIONREAD)", "0", sys(unix.SYS_IOCTL, uintptr(pipe[0]), 0x541b /* FIONREAD */, ioctlPtr)},
		{"ioctl(TCGETS)", "allowed", sys(unix.SYS_IOCTL, uintptr(pipe[0]), unix.TCGETS, termios)},
		// personality
		{"personality(query)", "0", sys(unix.SYS_PERSONALITY, 0xffffffff)},
		{"personality(PER_LINUX)", "0", sys(unix.SYS_PERSONALITY, 0)},
		{"personality(READ_IMPLIES_EXEC)", "EPERM", sys(unix.SYS_PERSONALITY, 0x0400000)},
		{"personality(ADDR_NO_RANDOMIZE)", "EPERM", sys(unix.SYS_PERSONALITY, 0x0040000)},
		{"personality(MMAP_PAGE_ZERO)", "EPERM", sys(unix.SYS_PERSONALITY, 0x0100000)},
		// seccomp
		{"seccomp(NEW_LISTENER)", "EPERM", sysClose(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, 0)},
		{"seccomp(GET_ACTION_AVAIL)", "0", sys(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, unsafe.Pointer(actionAllow))},
		// newer than the filter: absent, so libc falls back
		{"open_tree_attr (unknown to libseccomp 2.5)", "ENOSYS", sysClose(unix.SYS_OPEN_TREE_ATTR, neg(-1), 0, 0, 0, 0)},
		{"syscall 1023", "ENOSYS", sys(1023)},
		// setuid and setgid bits (the probes use a file nobody can have:
		// the filter answers before the kernel looks at the path)
		{"chmod(04755)", "EPERM", sys(unix.SYS_CHMOD, cstr("/nonexistent/x"), 0o4755)},
		{"chmod(02755)", "EPERM", sys(unix.SYS_CHMOD, cstr("/nonexistent/x"), 0o2755)},
		{"chmod(0755)", "ENOENT", sys(unix.SYS_CHMOD, cstr("/nonexistent/x"), 0o755)},
		{"fchmodat(06755)", "EPERM", sys(unix.SYS_FCHMODAT, neg(unix.AT_FDCWD), cstr("/nonexistent/x"), 0o6755)},
		{"fchmod(04755)", "EPERM", sys(unix.SYS_FCHMOD, neg(-1), 0o4755)},
		{"openat(O_CREAT, 04755)", "EPERM", sysClose(unix.SYS_OPENAT, neg(unix.AT_FDCWD), cstr("/nonexistent/x"), unix.O_CREAT|unix.O_WRONLY, 0o4755)},
		{"mknodat(S_IFREG|02755)", "EPERM", sys(unix.SYS_MKNODAT, neg(unix.AT_FDCWD), cstr("/nonexistent/x"), unix.S_IFREG|0o2755, 0)},
		{"openat2", "ENOSYS", sysClose(unix.SYS_OPENAT2, neg(unix.AT_FDCWD), cstr("/etc/passwd"), 0, 0)},
		// everyday calls
		{"getpid", "0", sys(unix.SYS_GETPID)},
		{"openat", "0", sysClose(unix.SYS_OPENAT, neg(unix.AT_FDCWD), cstr("/etc/passwd"), unix.O_RDONLY|unix.O_CLOEXEC)},
		{"getrandom", "0", sys(unix.SYS_GETRANDOM, termios, 16, 0)},
		{"memfd_create", "0", sysClose(unix.SYS_MEMFD_CREATE, cstr("x"), unix.MFD_CLOEXEC)},
		{"prctl(PR_GET_NO_NEW_PRIVS)", "0", sys(unix.SYS_PRCTL, unix.PR_GET_NO_NEW_PRIVS)},
	}
	return append(ps, archProbes()...)
}

func errnoName(e unix.Errno) string {
	if e == 0 {
		return "0"
	}
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return strconv.Itoa(int(e))
}

func childMain(mode string, args []string) int {
	runtime.LockOSThread() // for good: the filter binds this thread
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "child: "+format+"\n", a...)
		return 3
	}
	prog, err := os.ReadFile(os.Getenv(envProg))
	if err != nil {
		return fail("%v", err)
	}
	flags64, _ := strconv.ParseUint(os.Getenv(envFlags), 0, 32)
	flags := Flags(flags64)

	if mode == "allocs" {
		if err := SetNoNewPrivs(); err != nil {
			return fail("%v", err)
		}
		allocs := testing.AllocsPerRun(50, func() {
			if _, err := Load(prog, flags); err != nil {
				panic(err)
			}
		})
		fmt.Printf("allocs %v\n", allocs)
		return 0
	}
	if mode == "no-nnp" {
		_, err := Load(prog, flags)
		fmt.Printf("load %v\n", err)
		return 0
	}

	if err := SetNoNewPrivs(); err != nil {
		return fail("%v", err)
	}
	listener, err := Load(prog, flags)
	if err != nil {
		return fail("load: %v", err)
	}

	switch mode {
	case "probes":
		for _, p := range probes() {
			fmt.Printf("%s\t%s\n", p.name, errnoName(p.call()))
		}
		return 0

	case "int80": // i386 getpid through the compat gate
		r := abiprobe.Int80(20, 0, 0, 0)
		fmt.Printf("int80 returned %d\n", int(r))
		return 0

	case "x32": // x32 getpid: x86_64 number 39 with __X32_SYSCALL_BIT
		_, _, e := unix.RawSyscall(0x40000000|unix.SYS_GETPID, 0, 0, 0)
		fmt.Printf("x32 returned %s\n", errnoName(e))
		return 0

	case "spawn": // the command starts from this (filtered, locked) thread
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.Env = commandEnv()
		if err := cmd.Run(); err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				return ee.ExitCode()
			}
			return fail("spawn: %v", err)
		}
		return 0

	case "exec": // the init replaces itself, as a non-resident init would
		path, err := exec.LookPath(args[0])
		if err != nil {
			return fail("%v", err)
		}
		err = syscall.Exec(path, args, commandEnv())
		return fail("exec: %v", err)

	case "tsync": // another thread, locked before nothing: filtered only with TSYNC
		res := make(chan unix.Errno)
		go func() {
			runtime.LockOSThread()
			res <- sys(unix.SYS_KEYCTL, 0, neg(-3), 0)()
		}()
		fmt.Printf("other thread keyctl\t%s\n", errnoName(<-res))
		return 0

	case "notify", "notify-storm": // hand the listener to the parent over fd 3, then misbehave
		if err := unix.Sendmsg(3, []byte{'L'}, unix.UnixRights(listener), nil, 0); err != nil {
			return fail("sendmsg: %v", err)
		}
		unix.Close(listener) // whoever holds it decides denied calls
		var ack [1]byte
		if _, err := unix.Read(3, ack[:]); err != nil {
			return fail("read ack: %v", err)
		}
		if mode == "notify-storm" {
			return notifyStorm()
		}
		return notifyProbes(args)

	case "notify-closed": // the listener is gone before anything is denied
		unix.Close(listener)
		return notifyProbes(args)

	case "shadow", "shadow-open":
		return shadow(mode == "shadow", listener)
	}
	return fail("unknown mode %q", mode)
}

// notifyProbes makes the denied calls the notification tests expect, twice
// for keyctl so that counting is visible, then runs args (if any) as a
// command.
func notifyProbes(args []string) int {
	for _, p := range []probe{
		{name: "keyctl", call: sys(unix.SYS_KEYCTL, 0, neg(-3), 0)},
		{name: "keyctl", call: sys(unix.SYS_KEYCTL, 0, neg(-3), 0)},
		{name: "socket(AF_PACKET)", call: sysClose(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW, 0)},
		{name: "seccomp(NEW_LISTENER)", call: sysClose(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, 0)},
		{name: "getpid", call: sys(unix.SYS_GETPID)},
	} {
		fmt.Printf("%s\t%s\n", p.name, errnoName(p.call()))
	}
	if len(args) == 0 {
		return 0
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = commandEnv()
	out, err := cmd.CombinedOutput()
	fmt.Printf("command\t%v\t%q\n", err, out)
	return 0
}

// notifyStorm makes denied calls from many threads at once (the program is
// loaded with TSYNC), so that notifications queue up at the listener.
func notifyStorm() int {
	const threads, calls = 16, 50
	errs := make(chan unix.Errno, threads*calls)
	for i := 0; i < threads; i++ {
		go func() {
			runtime.LockOSThread()
			for j := 0; j < calls; j++ {
				errs <- sys(unix.SYS_KEYCTL, 0, neg(-3), 0)()
			}
		}()
	}
	counts := map[string]int{}
	for i := 0; i < threads*calls; i++ {
		counts[errnoName(<-errs)]++
	}
	for k, v := range counts {
		fmt.Printf("%s\t%d\n", k, v)
	}
	return 0
}

// shadow tries the nested-listener attack: install a second filter with a
// listener of its own that notifies on keyctl, answer "continue" from
// another thread, and see whether keyctl runs. closeOurs closes agentrun's
// listener first (the parent is gone).
func shadow(closeOurs bool, listener int) int {
	if closeOurs {
		unix.Close(listener)
	}
	nested, err := os.ReadFile(os.Getenv(envProg2))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	fd, err := Load(nested, FlagNewListener)
	if err != nil {
		fmt.Printf("nested load\t%v\n", err)
		return 0
	}
	fmt.Printf("nested load\tok\n")
	go func() { // answers from an unfiltered thread
		for {
			var req seccompNotif
			if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&req))); e != 0 {
				return
			}
			resp := seccompNotifResp{ID: req.ID, Flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
			unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp)))
		}
	}()
	r, _, e := unix.Syscall(unix.SYS_KEYCTL, 0, neg(-2) /* process keyring */, 1 /* create */)
	fmt.Printf("keyctl\t%s\t%d\n", errnoName(e), int(r))
	return 0
}

func commandEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AGENTRUN_SECCOMP_TEST_") {
			env = append(env, kv)
		}
	}
	return env
}
