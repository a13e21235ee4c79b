//go:build linux

// Command attacker is the hostile program of the integration suite. The
// tests copy it into a sandbox's workspace and run one subcommand per
// sandbox; each subcommand makes one real attempt, with raw system calls,
// at something the threat model forbids (or, for positive controls, at
// something the sandbox must allow).
//
// It prints exactly one verdict line on stdout and exits accordingly:
//
//	BLOCKED <detail>   exit 0   the operation failed
//	ESCAPED <detail>   exit 1   the operation succeeded
//	ERROR <detail>     exit 3   the attempt itself could not be made
//
// "ESCAPED" is the neutral name for "the operation went through": for an
// attack it is an escape, for a positive control it is the expected outcome.
// Diagnostics go to stderr. It is built static (CGO_ENABLED=0) so it runs on
// any host and inside any root.
package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/agentrun/agentrun/internal/abiprobe"
	"golang.org/x/sys/unix"
)

const (
	exitBlocked = 0
	exitEscaped = 1
	exitError   = 3
)

func blocked(format string, a ...any) {
	fmt.Printf("BLOCKED "+format+"\n", a...)
	os.Exit(exitBlocked)
}

func escaped(format string, a ...any) {
	fmt.Printf("ESCAPED "+format+"\n", a...)
	os.Exit(exitEscaped)
}

func fail(format string, a ...any) {
	fmt.Printf("ERROR "+format+"\n", a...)
	os.Exit(exitError)
}

func info(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "attacker: "+format+"\n", a...)
}

// errName renders an error as its errno name when it has one ("EPERM").
func errName(err error) string {
	var en syscall.Errno
	if errors.As(err, &en) {
		if n := unix.ErrnoName(en); n != "" {
			return n
		}
		return fmt.Sprintf("errno %d", int(en))
	}
	return err.Error()
}

type command struct {
	args string
	help string
	run  func(args []string)
}

var commands map[string]command

func init() {
	commands = map[string]command{
		"read":            {"PATH", "open and read a file; escaped if any byte is read", cmdRead},
		"ls":              {"DIR", "list a directory; escaped if it has entries", cmdLs},
		"stat":            {"PATH", "lstat a path; escaped if it exists", cmdStat},
		"write":           {"PATH [DATA]", "create/truncate and write a file", cmdWrite},
		"mkdir":           {"PATH", "create a directory", cmdMkdir},
		"chmod":           {"PATH", "make PATH world-writable (chmod 0666)", cmdChmod},
		"unlink":          {"PATH", "remove a file", cmdUnlink},
		"meta":            {"PATH", "change PATH without writing its data: chown, truncate, utimes, hard link, rename, set an xattr; escaped if any works", cmdMeta},
		"rename-exchange": {"A B", "renameat2(RENAME_EXCHANGE)", cmdRenameExchange},
		"open":            {"PATH r|w|rw|path", "open a path with the given access; escaped if it opens", cmdOpen},
		"exe-write":       {"PATH", "open PATH for writing (O_WRONLY, O_RDWR) and overwrite its first bytes", cmdExeWrite},
		"fd-reopen":       {"DIR", "reopen every entry of an fd directory (e.g. /proc/1/fd) for writing", cmdFdReopen},
		"ptrace":          {"PID", "PTRACE_ATTACH and PTRACE_SEIZE", cmdPtrace},
		"vmread":          {"PID", "process_vm_readv from PID", cmdVMRead},
		"kill":            {"PID SIG", "send a signal", cmdKill},
		"pidfd":           {"PID", "pidfd_open a pid", cmdPidfd},
		"pidscan":         {"MARKER", "scan /proc/*/cmdline for MARKER", cmdPidscan},
		"shmget":          {"KEY", "attach a SysV shared memory segment by key and read it", cmdShmget},
		"tcp":             {"HOST:PORT", "connect over TCP and read a banner", cmdTCP},
		"unix":            {"@NAME|PATH", "connect to a unix stream socket (@ = abstract)", cmdUnix},
		"dns":             {"NAME", "send a DNS query to the resolv.conf nameserver over UDP", cmdDNS},
		"netifs":          {"", "list network interfaces; escaped if any is not loopback", cmdNetifs},
		"envscan":         {"SUBSTR", "look for SUBSTR in the environment and /proc/*/environ", cmdEnvscan},
		"fds":             {"", "list open fds; escaped if any beyond 0-2", cmdFds},
		"unshare":         {"FLAGS", "create namespaces (user,mount,net,pid,ipc,uts,cgroup) in a child, as unshare(2) would", cmdUnshare},
		"mountop":         {"[-userns] [-mountns] [-netns] OP ARGS", "mount operation, optionally after a nested userns", cmdMountop},
		"chroot":          {"DIR", "chroot", cmdChroot},
		"mknod":           {"PATH", "mknod a char device (1,3)", cmdMknod},
		"sethostname":     {"NAME", "sethostname", cmdSethostname},
		"privsys":         {"NAME", "a privileged syscall: bpf-prog, bpf-map, perf-self, perf-cpu, uffd, uffd-user, io-uring, init-module, finit-module, delete-module, kexec, settimeofday, reboot, swapon, acct", cmdPrivsys},
		"keyctl-new":      {"", "add a key to the process keyring", cmdKeyctlNew},
		"keyctl-find":     {"DESC", "search the session, user and user-session keyrings for a user key", cmdKeyctlFind},
		"tiocsti":         {"DATA", "inject DATA into the terminal on fd 0 (also via /dev/tty and after setsid+TIOCSCTTY)", cmdTIOCSTI},
		"tioclinux":       {"", "TIOCLINUX on fd 0 and /dev/tty*", cmdTIOCLINUX},
		"caps":            {"", "escaped if any capability is held, no_new_privs is off or euid is 0", cmdCaps},
		"int80":           {"", "i386 getpid through int 0x80; escaped if the kernel answers", cmdInt80},
		"forkn":           {"N SECS", "start N sleeping children; escaped if all start", cmdForkN},
		"alloc":           {"MB", "allocate and touch MB MiB; escaped if it completes", cmdAlloc},
		"fill":            {"PATH MB", "write MB MiB to PATH; escaped if all is written", cmdFill},
		"sleep":           {"SECS", "sleep (helper for forkn)", cmdSleep},
	}
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		usage()
	}
	c.run(os.Args[2:])
	fail("%s: no verdict", os.Args[1])
}

// cmdInt80 enters the kernel through the 32-bit entry point, where a
// filter written for x86_64 numbers would read different syscalls. The
// default profile kills the process (SIGSYS) before anything runs.
func cmdInt80(args []string) {
	const i386Getpid = 20
	r := abiprobe.Int80(i386Getpid, 0, 0, 0)
	if int(r) == os.Getpid() {
		escaped("int 0x80 getpid answered %d", r)
	}
	blocked("int 0x80 getpid returned %d (%s)", int(r), unix.Errno(-int(r)))
}

func usage() {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: attacker SUBCOMMAND [ARGS]\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %s %s\n      %s\n", n, commands[n].args, commands[n].help)
	}
	fmt.Fprint(os.Stderr, b.String())
	fail("usage")
}

func need(args []string, n int) {
	if len(args) < n {
		fail("%s: want %d argument(s), got %d", os.Args[1], n, len(args))
	}
}

func quote(b []byte) string {
	if len(b) > 120 {
		b = b[:120]
	}
	return strconv.Quote(string(b))
}

func cmdRead(args []string) {
	need(args, 1)
	fd, err := unix.Open(args[0], unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		blocked("open %s: %s", args[0], errName(err))
	}
	buf := make([]byte, 64<<10)
	n, err := unix.Read(fd, buf)
	if err != nil {
		blocked("read %s: %s", args[0], errName(err))
	}
	if n == 0 {
		blocked("read %s: empty", args[0])
	}
	escaped("read %d bytes from %s: %s", n, args[0], quote(buf[:n]))
}

func cmdLs(args []string) {
	need(args, 1)
	f, err := os.Open(args[0])
	if err != nil {
		blocked("open %s: %s", args[0], errName(err))
	}
	names, err := f.Readdirnames(-1)
	if err != nil {
		blocked("readdir %s: %s", args[0], errName(err))
	}
	if len(names) == 0 {
		blocked("%s is empty", args[0])
	}
	sort.Strings(names)
	escaped("%s has %d entries: %s", args[0], len(names), strings.Join(names, ","))
}

func cmdStat(args []string) {
	need(args, 1)
	var st unix.Stat_t
	if err := unix.Lstat(args[0], &st); err != nil {
		blocked("lstat %s: %s", args[0], errName(err))
	}
	escaped("%s exists: mode %o uid %d gid %d size %d rdev %d:%d", args[0], st.Mode, st.Uid, st.Gid, st.Size, unix.Major(st.Rdev), unix.Minor(st.Rdev))
}

func cmdWrite(args []string) {
	need(args, 1)
	data := "agentrun-attacker-was-here\n"
	if len(args) > 1 {
		data = args[1]
	}
	fd, err := unix.Open(args[0], unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		blocked("open %s for writing: %s", args[0], errName(err))
	}
	n, err := unix.Write(fd, []byte(data))
	if err != nil {
		blocked("write %s: %s", args[0], errName(err))
	}
	if err := unix.Close(fd); err != nil {
		blocked("close %s: %s", args[0], errName(err))
	}
	escaped("wrote %d bytes to %s", n, args[0])
}

func cmdMkdir(args []string) {
	need(args, 1)
	if err := unix.Mkdir(args[0], 0o755); err != nil {
		blocked("mkdir %s: %s", args[0], errName(err))
	}
	escaped("created directory %s", args[0])
}

func cmdChmod(args []string) {
	need(args, 1)
	if err := unix.Chmod(args[0], 0o666); err != nil {
		blocked("chmod %s: %s", args[0], errName(err))
	}
	escaped("changed the mode of %s", args[0])
}

func cmdMeta(args []string) {
	need(args, 1)
	p := args[0]
	dir := filepath.Dir(p)
	ops := []struct {
		name string
		do   func() error
	}{
		{"chown", func() error { return unix.Lchown(p, os.Getuid(), os.Getgid()) }},
		{"truncate", func() error { return unix.Truncate(p, 0) }},
		{"utimes", func() error {
			return unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{{Sec: 1}, {Sec: 1}}, unix.AT_SYMLINK_NOFOLLOW)
		}},
		{"link", func() error { return unix.Link(p, filepath.Join(dir, ".agentrun-link")) }},
		{"rename", func() error { return unix.Rename(p, filepath.Join(dir, ".agentrun-renamed")) }},
		{"setxattr", func() error { return unix.Lsetxattr(p, "user.agentrun", []byte("x"), 0) }},
	}
	var errs []string
	for _, op := range ops {
		if err := op.do(); err == nil {
			escaped("%s %s went through", op.name, p)
		} else {
			errs = append(errs, op.name+": "+errName(err))
		}
	}
	blocked("%s: %s", p, strings.Join(errs, "; "))
}

func cmdUnlink(args []string) {
	need(args, 1)
	if err := unix.Unlink(args[0]); err != nil {
		blocked("unlink %s: %s", args[0], errName(err))
	}
	escaped("removed %s", args[0])
}

func cmdRenameExchange(args []string) {
	need(args, 2)
	if err := unix.Renameat2(unix.AT_FDCWD, args[0], unix.AT_FDCWD, args[1], unix.RENAME_EXCHANGE); err != nil {
		blocked("renameat2(%s, %s, RENAME_EXCHANGE): %s", args[0], args[1], errName(err))
	}
	escaped("exchanged %s and %s", args[0], args[1])
}

func accessFlags(s string) (int, bool) {
	switch s {
	case "r":
		return unix.O_RDONLY, true
	case "w":
		return unix.O_WRONLY, true
	case "rw":
		return unix.O_RDWR, true
	case "path":
		return unix.O_PATH, true
	}
	return 0, false
}

func cmdOpen(args []string) {
	need(args, 2)
	flags, ok := accessFlags(args[1])
	if !ok {
		fail("bad access %q (want r, w, rw or path)", args[1])
	}
	fd, err := unix.Open(args[0], flags|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		blocked("open(%s, %s): %s", args[0], args[1], errName(err))
	}
	target, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	escaped("open(%s, %s) succeeded: fd %d -> %s", args[0], args[1], fd, target)
}

// exeMarker is what exe-write tries to put at the start of the file; the
// test compares the host binary's digest before and after instead.
const exeMarker = "#!/bin/sh\necho PWNED-BY-SANDBOX\n"

func cmdExeWrite(args []string) {
	need(args, 1)
	var notes []string
	for _, acc := range []struct {
		name  string
		flags int
	}{{"O_WRONLY", unix.O_WRONLY}, {"O_RDWR", unix.O_RDWR}} {
		fd, err := unix.Open(args[0], acc.flags|unix.O_CLOEXEC, 0)
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: %s", acc.name, errName(err)))
			continue
		}
		target, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
		n, werr := unix.Pwrite(fd, []byte(exeMarker), 0)
		if werr != nil {
			escaped("open(%s, %s) succeeded (-> %s); pwrite: %s", args[0], acc.name, target, errName(werr))
		}
		escaped("open(%s, %s) succeeded (-> %s) and overwrote %d bytes", args[0], acc.name, target, n)
	}
	blocked("%s: %s", args[0], strings.Join(notes, "; "))
}

func cmdFdReopen(args []string) {
	need(args, 1)
	f, err := os.Open(args[0])
	if err != nil {
		blocked("open %s: %s", args[0], errName(err))
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		blocked("readdir %s: %s", args[0], errName(err))
	}
	var notes []string
	for _, n := range names {
		p := filepath.Join(args[0], n)
		fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: %s", n, errName(err)))
			continue
		}
		target, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
		escaped("reopened %s for writing -> %s", p, target)
	}
	blocked("listed %d entries of %s, none reopened for writing: %s", len(names), args[0], strings.Join(notes, "; "))
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fail("not a number: %q", s)
	}
	return n
}

func cmdPtrace(args []string) {
	need(args, 1)
	pid := atoi(args[0])
	err1 := unix.PtraceAttach(pid)
	if err1 == nil {
		_ = unix.PtraceDetach(pid)
		escaped("PTRACE_ATTACH %d succeeded", pid)
	}
	err2 := unix.PtraceSeize(pid)
	if err2 == nil {
		_ = unix.PtraceDetach(pid)
		escaped("PTRACE_SEIZE %d succeeded", pid)
	}
	blocked("PTRACE_ATTACH %d: %s; PTRACE_SEIZE: %s", pid, errName(err1), errName(err2))
}

func cmdVMRead(args []string) {
	need(args, 1)
	pid := atoi(args[0])
	// The address does not matter: the permission check comes first.
	buf := make([]byte, 8)
	local := []unix.Iovec{{Base: &buf[0], Len: uint64(len(buf))}}
	remote := []unix.RemoteIovec{{Base: 0x400000, Len: len(buf)}}
	n, err := unix.ProcessVMReadv(pid, local, remote, 0)
	if err != nil && !errors.Is(err, unix.EFAULT) {
		blocked("process_vm_readv(%d): %s", pid, errName(err))
	}
	escaped("process_vm_readv(%d) passed the permission check (n=%d err=%v)", pid, n, err)
}

func cmdKill(args []string) {
	need(args, 2)
	pid, sig := atoi(args[0]), atoi(args[1])
	if err := unix.Kill(pid, unix.Signal(sig)); err != nil {
		blocked("kill(%d, %d): %s", pid, sig, errName(err))
	}
	escaped("kill(%d, %d) succeeded", pid, sig)
}

func cmdPidfd(args []string) {
	need(args, 1)
	pid := atoi(args[0])
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		blocked("pidfd_open(%d): %s", pid, errName(err))
	}
	err = unix.PidfdSendSignal(fd, 0, nil, 0)
	escaped("pidfd_open(%d) = %d; pidfd_send_signal(0): %v", pid, fd, err)
}

func cmdPidscan(args []string) {
	need(args, 1)
	marker := []byte(args[0])
	ents, err := os.ReadDir("/proc")
	if err != nil {
		fail("read /proc: %s", errName(err))
	}
	var pids []string
	self := strconv.Itoa(os.Getpid())
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == self {
			continue
		}
		pids = append(pids, e.Name())
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		b = bytes.ReplaceAll(b, []byte{0}, []byte{' '})
		if bytes.Contains(b, marker) {
			escaped("pid %s has %q in its cmdline: %s", e.Name(), args[0], quote(b))
		}
	}
	blocked("marker not found among %d visible pids: %s", len(pids), strings.Join(pids, ","))
}

func cmdShmget(args []string) {
	need(args, 1)
	key := atoi(args[0])
	id, err := unix.SysvShmGet(key, 0, 0)
	if err != nil {
		blocked("shmget(%#x): %s", key, errName(err))
	}
	b, err := unix.SysvShmAttach(id, 0, unix.SHM_RDONLY)
	if err != nil {
		escaped("shmget(%#x) found segment %d (attach: %s)", key, id, errName(err))
	}
	n := bytes.IndexByte(b, 0)
	if n < 0 || n > 120 {
		n = 120
	}
	escaped("shmget(%#x) found segment %d: %s", key, id, quote(b[:n]))
}

func cmdTCP(args []string) {
	need(args, 1)
	c, err := net.DialTimeout("tcp", args[0], 3*time.Second)
	if err != nil {
		blocked("connect tcp %s: %s", args[0], netErr(err))
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 128)
	n, _ := c.Read(buf)
	escaped("connected to tcp %s, read %s", args[0], quote(buf[:n]))
}

func netErr(err error) string {
	var en syscall.Errno
	if errors.As(err, &en) {
		return errName(en)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return err.Error()
}

func cmdUnix(args []string) {
	need(args, 1)
	addr := args[0]
	if strings.HasPrefix(addr, "@") {
		addr = "\x00" + addr[1:]
	}
	c, err := net.DialTimeout("unix", addr, 3*time.Second)
	if err != nil {
		blocked("connect unix %s: %s", args[0], netErr(err))
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 128)
	n, _ := c.Read(buf)
	escaped("connected to unix %s, read %s", args[0], quote(buf[:n]))
}

func nameserver() (string, error) {
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			return f[1], nil
		}
	}
	return "", errors.New("no nameserver line in /etc/resolv.conf")
}

func dnsQuery(name string) []byte {
	q := []byte{0x4a, 0x52, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, label := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		q = append(q, byte(len(label)))
		q = append(q, label...)
	}
	return append(q, 0, 0, 1, 0, 1) // root, type A, class IN
}

func cmdDNS(args []string) {
	need(args, 1)
	ns, err := nameserver()
	if err != nil {
		blocked("no nameserver: %s", errName(err))
	}
	ip := net.ParseIP(ns)
	if ip == nil {
		fail("nameserver %q is not an IP", ns)
	}
	sa := &unix.SockaddrInet4{Port: 53}
	domain := unix.AF_INET
	var sa6 *unix.SockaddrInet6
	if ip4 := ip.To4(); ip4 != nil {
		copy(sa.Addr[:], ip4)
	} else {
		domain = unix.AF_INET6
		sa6 = &unix.SockaddrInet6{Port: 53}
		copy(sa6.Addr[:], ip.To16())
	}
	fd, err := unix.Socket(domain, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		blocked("socket: %s", errName(err))
	}
	var to unix.Sockaddr = sa
	if sa6 != nil {
		to = sa6
	}
	if err := unix.Sendto(fd, dnsQuery(args[0]), 0, to); err != nil {
		blocked("sendto %s:53: %s", ns, errName(err))
	}
	tv := unix.Timeval{Sec: 3}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	buf := make([]byte, 1500)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		blocked("query sent to %s:53, no answer: %s", ns, errName(err))
	}
	escaped("answer of %d bytes from %s:53", n, ns)
}

func cmdNetifs(args []string) {
	ifs, err := net.Interfaces()
	if err != nil {
		fail("interfaces: %v", err)
	}
	var names, other []string
	for _, i := range ifs {
		names = append(names, fmt.Sprintf("%s(%s)", i.Name, i.Flags))
		if i.Flags&net.FlagLoopback == 0 {
			other = append(other, i.Name)
		}
	}
	if len(other) > 0 {
		escaped("non-loopback interfaces %s; all: %s", strings.Join(other, ","), strings.Join(names, " "))
	}
	blocked("only loopback: %s", strings.Join(names, " "))
}

func cmdEnvscan(args []string) {
	need(args, 1)
	s := args[0]
	for _, kv := range os.Environ() {
		if strings.Contains(kv, s) {
			escaped("own environment has %q", kv)
		}
	}
	files, _ := filepath.Glob("/proc/[0-9]*/environ")
	var notes []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: %s", f, errName(err)))
			continue
		}
		if bytes.Contains(b, []byte(s)) {
			escaped("%s has %q", f, s)
		}
		notes = append(notes, f+": clean")
	}
	blocked("%q not found (%s)", s, strings.Join(notes, "; "))
}

func cmdFds(args []string) {
	// Probe fds directly (no directory fd of our own in the way), then
	// cross-check /proc/self/fd.
	var extra []string
	for fd := 3; fd < 1024; fd++ {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
			target, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
			extra = append(extra, fmt.Sprintf("%d->%s", fd, target))
		}
	}
	std := make([]string, 0, 3)
	for fd := 0; fd < 3; fd++ {
		target, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
		if err != nil {
			target = errName(err)
		}
		std = append(std, fmt.Sprintf("%d->%s", fd, target))
	}
	if len(extra) > 0 {
		escaped("fds beyond 0-2 are open: %s (stdio %s)", strings.Join(extra, " "), strings.Join(std, " "))
	}
	blocked("only stdio open: %s", strings.Join(std, " "))
}

var nsFlags = map[string]int{
	"user": unix.CLONE_NEWUSER, "mount": unix.CLONE_NEWNS, "net": unix.CLONE_NEWNET,
	"pid": unix.CLONE_NEWPID, "ipc": unix.CLONE_NEWIPC, "uts": unix.CLONE_NEWUTS,
	"cgroup": unix.CLONE_NEWCGROUP,
}

func parseNS(s string) int {
	flags := 0
	for _, n := range strings.Split(s, ",") {
		f, ok := nsFlags[n]
		if !ok {
			fail("unknown namespace %q", n)
		}
		flags |= f
	}
	return flags
}

func cmdUnshare(args []string) {
	need(args, 1)
	// unshare(CLONE_NEWUSER) needs a single-threaded caller; Go's runtime
	// has threads, so do it in a forked child via clone flags instead,
	// which is the same kernel check (create_user_ns and friends).
	flags := parseNS(args[0])
	pid, err := forkWithFlags(flags)
	if err != nil {
		blocked("clone(%s): %s", args[0], errName(err))
	}
	escaped("created namespaces %s (child pid %d)", args[0], pid)
}

// forkWithFlags starts /proc/self/exe "sleep 0" in new namespaces and
// waits for it.
func forkWithFlags(flags int) (int, error) {
	p, err := os.StartProcess("/proc/self/exe", []string{"attacker", "sleep", "0"}, &os.ProcAttr{
		Files: []*os.File{nil, os.Stderr, os.Stderr},
		Sys:   &syscall.SysProcAttr{Cloneflags: uintptr(flags)},
	})
	if err != nil {
		return 0, err
	}
	_, _ = p.Wait()
	return p.Pid, nil
}

// nestedEnv reports whether this process is the re-executed child of
// runNested. Go cannot unshare(CLONE_NEWUSER) in a multi-threaded process,
// so the "unshare -U -r" shape is a re-exec through clone with the same
// flags and uid/gid 0 mapped to the caller's ids.
func nestedEnv() bool { return os.Getenv("ATTACKER_NESTED") == "1" }

func cmdMountop(args []string) {
	var flags int
	var names []string
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-userns":
			flags |= unix.CLONE_NEWUSER
		case "-mountns":
			flags |= unix.CLONE_NEWNS
		case "-netns":
			flags |= unix.CLONE_NEWNET
		case "-pidns":
			flags |= unix.CLONE_NEWPID
		default:
			fail("unknown option %s", args[0])
		}
		names = append(names, args[0])
		args = args[1:]
	}
	need(args, 1)
	if flags != 0 && !nestedEnv() {
		runNested(flags, names, args)
		return
	}
	mountOp(args)
}

// runNested re-executes "mountop OP ARGS" as root of new namespaces (uid
// and gid 0 mapped to our own ids) and relays its verdict.
func runNested(flags int, names, args []string) {
	uid, gid := os.Getuid(), os.Getgid()
	attr := &syscall.SysProcAttr{Cloneflags: uintptr(flags)}
	if flags&unix.CLONE_NEWUSER != 0 {
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
	r, w, err := os.Pipe()
	if err != nil {
		fail("pipe: %v", err)
	}
	p, err := os.StartProcess("/proc/self/exe", append([]string{"attacker", "mountop"}, args...), &os.ProcAttr{
		Env:   append(os.Environ(), "ATTACKER_NESTED=1"),
		Files: []*os.File{nil, w, os.Stderr},
		Sys:   attr,
	})
	w.Close()
	if err != nil {
		blocked("entering nested namespaces %s: %s", strings.Join(names, " "), errName(err))
	}
	out := new(bytes.Buffer)
	_, _ = out.ReadFrom(r)
	st, _ := p.Wait()
	line := strings.TrimSpace(out.String())
	info("nested %s: %s (%v)", strings.Join(names, " "), line, st)
	switch {
	case strings.HasPrefix(line, "BLOCKED "):
		blocked("after nested %s: %s", strings.Join(names, " "), strings.TrimPrefix(line, "BLOCKED "))
	case strings.HasPrefix(line, "ESCAPED "):
		escaped("after nested %s: %s", strings.Join(names, " "), strings.TrimPrefix(line, "ESCAPED "))
	}
	fail("nested child gave no verdict: %q (%v)", line, st)
}

func mountOp(args []string) {
	op := args[0]
	arg := func(i int) string {
		if len(args) <= i {
			fail("mountop %s: missing argument %d", op, i)
		}
		return args[i]
	}
	var err error
	switch op {
	case "umount":
		err = unix.Unmount(arg(1), 0)
	case "umount-detach":
		err = unix.Unmount(arg(1), unix.MNT_DETACH)
	case "remount-rw":
		// Clear MS_RDONLY on the existing bind mount.
		err = unix.Mount("", arg(1), "", unix.MS_REMOUNT|unix.MS_BIND, "")
	case "setattr-rw":
		err = unix.MountSetattr(unix.AT_FDCWD, arg(1), 0, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY})
	case "setattr-suid":
		err = unix.MountSetattr(unix.AT_FDCWD, arg(1), 0, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_NOSUID})
	case "bind":
		err = unix.Mount(arg(1), arg(2), "", unix.MS_BIND|unix.MS_REC, "")
	case "tmpfs":
		err = unix.Mount("tmpfs", arg(1), "tmpfs", 0, "size=1m")
	case "proc":
		_ = os.MkdirAll(arg(1), 0o755)
		err = unix.Mount("proc", arg(1), "proc", 0, "")
	case "sysfs":
		_ = os.MkdirAll(arg(1), 0o755)
		err = unix.Mount("sysfs", arg(1), "sysfs", 0, "")
	case "pivot_root":
		err = unix.PivotRoot(arg(1), arg(2))
	case "chroot":
		err = unix.Chroot(arg(1))
	default:
		fail("unknown mount op %q", op)
	}
	if err != nil {
		blocked("%s: %s", strings.Join(args, " "), errName(err))
	}
	detail := ""
	if op == "umount" || op == "umount-detach" {
		// Show what the path is now.
		if b, rerr := os.ReadFile(arg(1)); rerr == nil {
			detail = fmt.Sprintf("; %s now reads %d bytes", arg(1), len(b))
		}
	}
	escaped("%s succeeded%s", strings.Join(args, " "), detail)
}

func cmdChroot(args []string) {
	need(args, 1)
	if err := unix.Chroot(args[0]); err != nil {
		blocked("chroot %s: %s", args[0], errName(err))
	}
	escaped("chroot %s succeeded", args[0])
}

func cmdMknod(args []string) {
	need(args, 1)
	if err := unix.Mknod(args[0], unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		blocked("mknod %s: %s", args[0], errName(err))
	}
	escaped("mknod %s c 1 3 succeeded", args[0])
}

func cmdSethostname(args []string) {
	need(args, 1)
	if err := unix.Sethostname([]byte(args[0])); err != nil {
		blocked("sethostname: %s", errName(err))
	}
	escaped("sethostname(%s) succeeded", args[0])
}

// bpfAttr is a zeroed union bpf_attr large enough for the commands used.
type bpfAttr [128]byte

func bpf(cmd int, attr *bpfAttr) (int, error) {
	r, _, e := unix.Syscall(unix.SYS_BPF, uintptr(cmd), uintptr(unsafe.Pointer(attr)), unsafe.Sizeof(*attr))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

func cmdPrivsys(args []string) {
	need(args, 1)
	var (
		fd  int
		err error
	)
	switch args[0] {
	case "bpf-prog":
		// BPF_PROG_LOAD of a socket filter "r0 = 0; exit".
		insns := []byte{0xb7, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0}
		license := []byte("GPL\x00")
		var a bpfAttr
		binary.LittleEndian.PutUint32(a[0:], 1) // BPF_PROG_TYPE_SOCKET_FILTER
		binary.LittleEndian.PutUint32(a[4:], 2) // insn_cnt
		binary.LittleEndian.PutUint64(a[8:], uint64(uintptr(unsafe.Pointer(&insns[0]))))
		binary.LittleEndian.PutUint64(a[16:], uint64(uintptr(unsafe.Pointer(&license[0]))))
		fd, err = bpf(5, &a) // BPF_PROG_LOAD
	case "bpf-map":
		var a bpfAttr
		binary.LittleEndian.PutUint32(a[0:], 2)  // BPF_MAP_TYPE_ARRAY
		binary.LittleEndian.PutUint32(a[4:], 4)  // key_size
		binary.LittleEndian.PutUint32(a[8:], 4)  // value_size
		binary.LittleEndian.PutUint32(a[12:], 1) // max_entries
		fd, err = bpf(0, &a)                     // BPF_MAP_CREATE
	case "perf-self", "perf-cpu":
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_SOFTWARE,
			Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Bits:   unix.PerfBitDisabled,
		}
		attr.Size = uint32(unsafe.Sizeof(attr))
		pid, cpu := 0, -1
		if args[0] == "perf-self" {
			attr.Bits |= unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv
		} else {
			pid, cpu = -1, 0 // system-wide on CPU 0
		}
		fd, err = unix.PerfEventOpen(&attr, pid, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	case "uffd", "uffd-user":
		flags := uintptr(unix.O_CLOEXEC)
		if args[0] == "uffd-user" {
			flags |= 1 // UFFD_USER_MODE_ONLY
		}
		r, _, e := unix.Syscall(unix.SYS_USERFAULTFD, flags, 0, 0)
		fd = int(r)
		if e != 0 {
			err = e
		}
	case "io-uring":
		var params [120]byte // struct io_uring_params
		r, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
		fd = int(r)
		if e != 0 {
			err = e
		}
	case "init-module":
		// An empty image: EPERM comes before any parsing.
		err = unix.InitModule([]byte{0x7f, 'E', 'L', 'F'}, "")
	case "finit-module":
		f, oerr := os.Open("/proc/self/exe")
		if oerr != nil {
			fail("open self: %v", oerr)
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
	case "delete-module":
		err = unix.DeleteModule("agentrun_no_such_module", unix.O_NONBLOCK)
		if errors.Is(err, unix.ENOENT) {
			// Got past the capability check: that is the escape.
			escaped("delete_module reached the module lookup (ENOENT)")
		}
	case "kexec":
		_, _, e := unix.Syscall6(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0, 0, 0)
		if e != 0 {
			err = e
		}
		if errors.Is(err, unix.EINVAL) {
			escaped("kexec_load reached argument checks (EINVAL)")
		}
	case "settimeofday":
		var tv unix.Timeval
		if err = unix.Gettimeofday(&tv); err == nil {
			err = unix.Settimeofday(&tv)
		}
	case "reboot":
		// CAD_OFF is harmless if it were ever allowed.
		err = unix.Reboot(unix.LINUX_REBOOT_CMD_CAD_OFF)
	case "swapon":
		p, _ := unix.BytePtrFromString("/workspace/agentrun-no-swap")
		_, _, e := unix.Syscall(unix.SYS_SWAPON, uintptr(unsafe.Pointer(p)), 0, 0)
		if e != 0 {
			err = e
		}
		if errors.Is(err, unix.ENOENT) {
			escaped("swapon reached the path lookup (ENOENT)")
		}
	case "acct":
		err = unix.Acct("/workspace/agentrun-acct")
		if err == nil {
			_ = unix.Acct("")
		}
	default:
		fail("unknown privileged syscall %q", args[0])
	}
	if err != nil {
		blocked("%s: %s", args[0], errName(err))
	}
	escaped("%s succeeded (fd %d)", args[0], fd)
}

func cmdKeyctlNew(args []string) {
	id, err := unix.AddKey("user", "agentrun-attacker-probe", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING)
	if err != nil {
		blocked("add_key: %s", errName(err))
	}
	escaped("add_key succeeded: key %d", id)
}

func cmdKeyctlFind(args []string) {
	need(args, 1)
	var notes []string
	for _, ring := range []struct {
		name string
		id   int
	}{
		{"session", unix.KEY_SPEC_SESSION_KEYRING},
		{"user", unix.KEY_SPEC_USER_KEYRING},
		{"user-session", unix.KEY_SPEC_USER_SESSION_KEYRING},
	} {
		id, err := unix.KeyctlSearch(ring.id, "user", args[0], 0)
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: %s", ring.name, errName(err)))
			continue
		}
		buf := make([]byte, 256)
		n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, id, buf, 0)
		if err != nil {
			escaped("found key %d %q in the %s keyring (read: %s)", id, args[0], ring.name, errName(err))
		}
		if n > len(buf) {
			n = len(buf)
		}
		escaped("found key %d %q in the %s keyring, payload %s", id, args[0], ring.name, quote(buf[:n]))
	}
	blocked("%s", strings.Join(notes, "; "))
}

func tiocsti(fd int, data string) error {
	for i := 0; i < len(data); i++ {
		c := data[i]
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCSTI, uintptr(unsafe.Pointer(&c))); e != 0 {
			return e
		}
	}
	return nil
}

func cmdTIOCSTI(args []string) {
	need(args, 1)
	data := args[0]
	var notes []string
	// 1. Straight at the inherited terminal.
	if err := tiocsti(0, data); err == nil {
		escaped("TIOCSTI on fd 0 injected %q", data)
	} else {
		notes = append(notes, "fd 0: "+errName(err))
	}
	// 2. Through the controlling terminal, if there is one.
	if fd, err := unix.Open("/dev/tty", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0); err != nil {
		notes = append(notes, "open /dev/tty: "+errName(err))
	} else {
		if err := tiocsti(fd, data); err == nil {
			escaped("TIOCSTI on /dev/tty injected %q", data)
		} else {
			notes = append(notes, "/dev/tty: "+errName(err))
		}
	}
	// 3. Make the terminal our controlling terminal first: new session,
	// then TIOCSCTTY (and the "steal" variant with arg 1).
	if _, err := unix.Setsid(); err != nil {
		notes = append(notes, "setsid: "+errName(err))
	}
	for _, steal := range []int{0, 1} {
		if err := unix.IoctlSetInt(0, unix.TIOCSCTTY, steal); err != nil {
			notes = append(notes, fmt.Sprintf("TIOCSCTTY(%d): %s", steal, errName(err)))
			continue
		}
		if err := tiocsti(0, data); err == nil {
			escaped("TIOCSTI after TIOCSCTTY(%d) injected %q", steal, data)
		} else {
			notes = append(notes, fmt.Sprintf("after TIOCSCTTY(%d): %s", steal, errName(err)))
		}
	}
	blocked("%s", strings.Join(notes, "; "))
}

func cmdTIOCLINUX(args []string) {
	var notes []string
	try := func(name string, fd int) {
		// Subcode 3 = TIOCL_PASTESEL (paste the selection as input);
		// subcode 2 = TIOCL_SETSEL with a zeroed selection.
		for _, sub := range []byte{3, 2} {
			buf := make([]byte, 16)
			buf[0] = sub
			_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCLINUX, uintptr(unsafe.Pointer(&buf[0])))
			if e == 0 {
				escaped("TIOCLINUX subcode %d on %s succeeded", sub, name)
			}
			notes = append(notes, fmt.Sprintf("%s subcode %d: %s", name, sub, errName(e)))
		}
	}
	try("fd 0", 0)
	for _, p := range []string{"/dev/tty", "/dev/tty0", "/dev/tty1", "/dev/console", "/dev/vcs"} {
		fd, err := unix.Open(p, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			notes = append(notes, fmt.Sprintf("open %s: %s", p, errName(err)))
			continue
		}
		try(p, fd)
	}
	blocked("%s", strings.Join(notes, "; "))
}

func cmdCaps(args []string) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		fail("read status: %v", err)
	}
	var bad, seen []string
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb":
			seen = append(seen, k+"="+v)
			if strings.Trim(v, "0") != "" {
				bad = append(bad, k+"="+v)
			}
		case "NoNewPrivs", "Seccomp":
			seen = append(seen, k+"="+v)
			if k == "NoNewPrivs" && v != "1" {
				bad = append(bad, k+"="+v)
			}
		case "Uid", "Gid":
			seen = append(seen, k+"="+strings.Join(strings.Fields(v), ","))
		}
	}
	if os.Geteuid() == 0 || os.Getegid() == 0 {
		bad = append(bad, fmt.Sprintf("euid=%d egid=%d", os.Geteuid(), os.Getegid()))
	}
	if len(bad) > 0 {
		escaped("privileged: %s (all: %s)", strings.Join(bad, " "), strings.Join(seen, " "))
	}
	blocked("unprivileged: %s", strings.Join(seen, " "))
}

func cmdForkN(args []string) {
	need(args, 2)
	n := atoi(args[0])
	started := 0
	var lastErr error
	for i := 0; i < n; i++ {
		_, err := os.StartProcess("/proc/self/exe", []string{"attacker", "sleep", args[1]}, &os.ProcAttr{})
		if err != nil {
			lastErr = err
			break
		}
		started++
	}
	if started == n {
		escaped("started all %d children", n)
	}
	blocked("started %d of %d children: %s", started, n, errName(lastErr))
}

func cmdAlloc(args []string) {
	need(args, 1)
	mb := atoi(args[0])
	chunks := make([][]byte, 0, mb)
	for i := 0; i < mb; i++ {
		c := make([]byte, 1<<20)
		for j := 0; j < len(c); j += 4096 {
			c[j] = 1
		}
		chunks = append(chunks, c)
	}
	escaped("allocated and touched %d MiB", len(chunks))
}

func cmdFill(args []string) {
	need(args, 2)
	signal.Ignore(unix.SIGXFSZ)
	mb := atoi(args[1])
	f, err := os.OpenFile(args[0], os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		blocked("open %s: %s", args[0], errName(err))
	}
	chunk := make([]byte, 1<<20)
	written := 0
	for i := 0; i < mb; i++ {
		n, err := f.Write(chunk)
		written += n
		if err != nil {
			blocked("wrote %d bytes of %d MiB: %s", written, mb, errName(err))
		}
	}
	if err := f.Close(); err != nil {
		blocked("close after %d bytes: %s", written, errName(err))
	}
	escaped("wrote all %d MiB", mb)
}

func cmdSleep(args []string) {
	need(args, 1)
	d, err := time.ParseDuration(args[0] + "s")
	if err != nil {
		fail("bad seconds %q", args[0])
	}
	time.Sleep(d)
	os.Exit(0)
}
