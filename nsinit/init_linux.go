//go:build linux

package nsinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/agentrun/agentrun/mounts"
	"github.com/agentrun/agentrun/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// IsInit reports whether this process is the re-exec'd sandbox init.
func IsInit() bool { return len(os.Args) > 0 && os.Args[0] == InitArg0 }

// forwarded are the signals PID 1 passes on to the command. SIGCHLD is
// absent on purpose: PID 1 reaps with wait4 instead.
var forwarded = [...]os.Signal{
	unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1,
	unix.SIGUSR2, unix.SIGWINCH, unix.SIGCONT, unix.SIGALRM,
}

// Init runs the child side and never returns.
func Init() {
	// Capabilities, no_new_privs and seccomp are per thread: everything
	// from the privilege drop to the fork of the command stays on this one.
	runtime.LockOSThread()
	sock := os.NewFile(syncFD, "sync")
	code, err := initMain(sock)
	if err != nil {
		var se *StepError
		if !errors.As(err, &se) {
			se = &StepError{Step: "init", Msg: err.Error()}
		}
		send(sock, &report{Type: repError, Step: se.Step, Error: se.Msg})
		os.Exit(ExitSetupFailed)
	}
	os.Exit(code)
}

// ExitSetupFailed is init's status when the sandbox could not be built.
const ExitSetupFailed = 125

func send(sock *os.File, r *report) {
	b, _ := json.Marshal(r)
	// The parent may be gone; there is nobody left to tell then.
	_, _ = sock.Write(b)
}

func step(name string, err error) error {
	if err == nil {
		return nil
	}
	return &StepError{Step: name, Msg: err.Error()}
}

func readConfig(sock *os.File) (*config, error) {
	fd := int(sock.Fd())
	// One byte more than a chunk: a longer message would be cut silently.
	buf := make([]byte, configChunk+1)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	size, err := strconv.Atoi(strings.TrimPrefix(string(buf[:n]), "config "))
	if !strings.HasPrefix(string(buf[:n]), "config ") || err != nil || size < 0 || size > maxConfig {
		return nil, fmt.Errorf("read config: bad header %.40q", buf[:n])
	}
	msg := make([]byte, 0, size)
	for len(msg) < size {
		n, err := unix.Read(fd, buf)
		if err != nil {
			return nil, fmt.Errorf("read config: %w", err)
		}
		if n == 0 || n > configChunk || len(msg)+n > size {
			return nil, fmt.Errorf("read config: %d of %d bytes, then a message of %d", len(msg), size, n)
		}
		msg = append(msg, buf[:n]...)
	}
	var c config
	if err := json.Unmarshal(msg, &c); err != nil {
		return nil, fmt.Errorf("decode config: %w", err)
	}
	if c.Spec == nil || c.Spec.Process == nil {
		return nil, errors.New("config without spec or process")
	}
	return &c, nil
}

func initMain(sock *os.File) (int, error) {
	// Non-dumpable: nothing in the sandbox may ptrace PID 1 or open its
	// /proc entries. /proc/1/exe is the agentrun binary on the host; with
	// PID 1 non-dumpable and the command holding no capability, opening it
	// fails, which is the protection against the CVE-2019-5736 shape. It
	// costs one prctl instead of copying the binary into a memfd per spawn.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return 0, step("set non-dumpable", err)
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded[:]...)

	c, err := readConfig(sock)
	if err != nil {
		return 0, step("sync", err)
	}
	spec := c.Spec
	if HasNamespace(spec, specs.CgroupNamespace) {
		// The parent has placed us in the sandbox's cgroup by now.
		if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
			return 0, step("cgroup namespace", err)
		}
	}
	// Whatever fds the caller leaked to us must not reach the command.
	first := uint(syncFD + 1 + len(c.Prepared))
	if err := unix.CloseRange(first, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return 0, step("close inherited fds", err)
	}
	unix.CloseOnExec(syncFD)

	if spec.Hostname != "" {
		if err := unix.Sethostname([]byte(spec.Hostname)); err != nil {
			return 0, step("sethostname", err)
		}
	}
	if err := mounts.Setup(spec, mounts.Prepared(c.Prepared)); err != nil {
		var me *mounts.Error
		if errors.As(err, &me) {
			return 0, &StepError{Step: "mount " + me.Dest, Msg: err.Error()}
		}
		return 0, step("mounts", err)
	}
	if HasNamespace(spec, specs.NetworkNamespace) {
		if err := netlink.LinkSetUp(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: 1, Name: "lo"}}); err != nil {
			return 0, step("loopback up", err)
		}
	}
	proc := spec.Process
	if err := unix.Chdir(proc.Cwd); err != nil {
		return 0, step("chdir "+proc.Cwd, err)
	}
	if err := setRlimits(proc.Rlimits); err != nil {
		return 0, step("rlimits", err)
	}
	argv0, code, err := lookPath(proc.Args[0], proc.Env)
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentrun: %s: %v\n", proc.Args[0], err)
		send(sock, &report{Type: repExit, Code: code})
		return code, nil
	}
	// A fresh anonymous session keyring: the one inherited from the caller
	// would give the command the caller's keys.
	if _, _, errno := unix.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0); errno != 0 {
		return 0, step("session keyring", errno)
	}
	if err := dropPrivileges(proc); err != nil {
		return 0, step("drop privileges", err)
	}
	// Last: from here on this thread, and the command forked from it, run
	// under the filter.
	if len(c.Seccomp) > 0 {
		fd, err := seccomp.Load(c.Seccomp, seccomp.Flags(c.SeccompFlags))
		if err != nil {
			return 0, step("seccomp", err)
		}
		if fd >= 0 {
			// Whoever holds the listener decides denied calls: it goes to
			// the parent and never reaches the command.
			b, _ := json.Marshal(&report{Type: repListener})
			err := unix.Sendmsg(syncFD, b, unix.UnixRights(fd), nil, 0)
			unix.Close(fd)
			if err != nil {
				return 0, step("seccomp listener", err)
			}
		}
	}
	p, err := os.StartProcess(argv0, proc.Args, &os.ProcAttr{
		Env:   proc.Env,
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
	})
	if err != nil {
		code := 126
		if errors.Is(err, unix.ENOENT) {
			code = 127
		}
		fmt.Fprintf(os.Stderr, "agentrun: %s: %v\n", proc.Args[0], err)
		send(sock, &report{Type: repExit, Code: code})
		return code, nil
	}
	send(sock, &report{Type: repStarted, Pid: p.Pid})
	go func() {
		for s := range sigs {
			_ = unix.Kill(p.Pid, s.(syscall.Signal))
		}
	}()
	r := reap(p.Pid)
	send(sock, &r)
	if r.Signal != 0 {
		return 128 + r.Signal, nil
	}
	return r.Code, nil
}

// HasNamespace reports whether s asks for a new namespace of type t
// (one to create, not one to join).
func HasNamespace(s *specs.Spec, t specs.LinuxNamespaceType) bool {
	if s.Linux == nil {
		return false
	}
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == t && ns.Path == "" {
			return true
		}
	}
	return false
}

// reap waits for every child until the command itself exits. Orphans that
// PID 1 inherits are reaped on the way; whatever is still running when the
// command ends dies with the PID namespace when init exits.
func reap(cmd int) report {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return report{Type: repExit, Code: 255}
		}
		if pid != cmd {
			continue
		}
		if ws.Signaled() {
			return report{Type: repExit, Signal: int(ws.Signal())}
		}
		return report{Type: repExit, Code: ws.ExitStatus()}
	}
}

// rlimitResource maps an OCI rlimit name to its resource number.
func rlimitResource(name string) (int, bool) {
	switch name {
	case "RLIMIT_NOFILE":
		return unix.RLIMIT_NOFILE, true
	case "RLIMIT_FSIZE":
		return unix.RLIMIT_FSIZE, true
	case "RLIMIT_CPU":
		return unix.RLIMIT_CPU, true
	case "RLIMIT_NPROC":
		return unix.RLIMIT_NPROC, true
	case "RLIMIT_AS":
		return unix.RLIMIT_AS, true
	case "RLIMIT_CORE":
		return unix.RLIMIT_CORE, true
	case "RLIMIT_DATA":
		return unix.RLIMIT_DATA, true
	case "RLIMIT_STACK":
		return unix.RLIMIT_STACK, true
	case "RLIMIT_MEMLOCK":
		return unix.RLIMIT_MEMLOCK, true
	case "RLIMIT_MSGQUEUE":
		return unix.RLIMIT_MSGQUEUE, true
	case "RLIMIT_NICE":
		return unix.RLIMIT_NICE, true
	case "RLIMIT_RTPRIO":
		return unix.RLIMIT_RTPRIO, true
	case "RLIMIT_RTTIME":
		return unix.RLIMIT_RTTIME, true
	case "RLIMIT_SIGPENDING":
		return unix.RLIMIT_SIGPENDING, true
	case "RLIMIT_LOCKS":
		return unix.RLIMIT_LOCKS, true
	}
	return 0, false
}

// setRlimits applies limits that the parent already clamped to what this
// process may set.
func setRlimits(rl []specs.POSIXRlimit) error {
	for _, r := range rl {
		res, ok := rlimitResource(r.Type)
		if !ok {
			return fmt.Errorf("unknown rlimit %s", r.Type)
		}
		if err := unix.Setrlimit(res, &unix.Rlimit{Cur: r.Soft, Max: r.Hard}); err != nil {
			return fmt.Errorf("%s: %w", r.Type, err)
		}
	}
	return nil
}

// lookPath resolves argv[0] with the command's PATH, inside the new root.
// The int is the shell-style status when it fails: 127 not found, 126 not
// executable.
func lookPath(name string, env []string) (string, int, error) {
	if strings.Contains(name, "/") {
		return name, 0, nil
	}
	pathEnv := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	denied := false
	for _, dir := range strings.Split(pathEnv, ":") {
		if dir == "" {
			dir = "."
		}
		p := path.Join(dir, name)
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil || st.Mode&unix.S_IFMT == unix.S_IFDIR {
			continue
		}
		if unix.Access(p, unix.X_OK) == nil {
			return p, 0, nil
		}
		denied = true
	}
	if denied {
		return "", 126, errors.New("permission denied")
	}
	return "", 127, errors.New("command not found")
}
