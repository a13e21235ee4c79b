//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/agentrun/agentrun"
	"github.com/agentrun/agentrun/cgroups"
	"github.com/agentrun/agentrun/lifecycle"
	"github.com/agentrun/agentrun/nsinit"
	"github.com/agentrun/agentrun/probe"
	"github.com/agentrun/agentrun/session"
	"golang.org/x/sys/unix"
)

// holderVerb is the hidden command under which the CLI re-executes itself
// to hold a session (session.RunHolder).
const holderVerb = "__session-holder"

// defaultIdleTimeout is how long a session made by create lives with no
// client and no request.
const defaultIdleTimeout = time.Hour

// sessionVerbs are the commands of sessions.
var sessionVerbs = map[string]func(args []string, stdout, stderr io.Writer) int{
	"create": createCmd,
	"exec":   execCmd,
	"list":   listCmd,
	"state":  stateCmd,
	"kill":   killCmd,
	"delete": deleteCmd,
	holderVerb: func([]string, io.Writer, io.Writer) int {
		// Non-blocking, so that the wait for the acknowledgement can time
		// out (os.NewFile polls only such descriptors).
		_ = unix.SetNonblock(3, true)
		return session.RunHolder(os.Stdin, os.NewFile(3, "ready"), nil, probe.UsernsBlockerFor)
	},
}

// parseVerb parses a verb's flags, printing its usage for -h; it returns
// the status to exit with when the command should not go on.
func parseVerb(fs *flag.FlagSet, args []string, usage string, stderr io.Writer) (int, bool) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stdout, "usage: agentrun "+usage)
			fs.SetOutput(os.Stdout)
			fs.PrintDefaults()
			return 0, false
		}
		fmt.Fprintf(stderr, "agentrun: %s: %v\nusage: agentrun %s\n", fs.Name(), err, usage)
		return 2, false
	}
	return 0, true
}

// oneID takes the verb's single ID argument.
func oneID(fs *flag.FlagSet, usage string, stderr io.Writer) (string, int, bool) {
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "agentrun: %s: want one session ID\nusage: agentrun %s\n", fs.Name(), usage)
		return "", 2, false
	}
	id := fs.Arg(0)
	if err := lifecycle.ValidID(id); err != nil {
		fmt.Fprintf(stderr, "agentrun: %s: %v\n", fs.Name(), err)
		return "", 2, false
	}
	return id, 0, true
}

// sweep removes what the holders that died (SIGKILL) left: their
// records, sockets and inits (lifecycle.Sweep) and then, if there were
// any or cgroupsToo says so, their cgroups, which the cgroups' own sweep
// would otherwise leave until the next sandbox is made. A holder's cgroup
// outlives its record while the holder is a zombie (cgroups.Sweep counts
// it alive; the host's PID 1 may take seconds to reap it), so list and
// delete, which a user runs to see or clean up, sweep the cgroups anyway.
func sweep(dir string, cgroupsToo bool) (int, error) {
	n, err := lifecycle.Sweep(dir)
	if n > 0 || cgroupsToo {
		if m, merr := cgroups.NewManager(cgroups.Options{ScopeHolder: nsinit.HoldCommand}); merr == nil {
			_, _ = m.Sweep()
		}
	}
	return n, err
}

func createCmd(args []string, stdout, stderr io.Writer) int {
	const usage = "create [policy flags] [--idle-timeout D] [--json] ID"
	fs := flag.NewFlagSet("create", flag.ContinueOnError)
	var pf policyFlags
	pf.register(fs, false)
	idle := fs.Duration("idle-timeout", defaultIdleTimeout, "delete the session after this long with no client and no request (0: never)")
	asJSON := fs.Bool("json", false, "print the new session's id, socket and pid as JSON")
	if code, ok := parseVerb(fs, args, usage, stderr); !ok {
		return code
	}
	id, code, ok := oneID(fs, usage, stderr)
	if !ok {
		return code
	}
	if *idle < 0 {
		fmt.Fprintf(stderr, "agentrun: create: --idle-timeout %s: want a duration of 0 or more\n", *idle)
		return 2
	}
	p, err := pf.policy(os.Stdin)
	if err != nil {
		return fail(stderr, "create: %v", err)
	}
	host, err := agentrun.NewHostInfo(p)
	if err != nil {
		return fail(stderr, "create: %v", err)
	}
	spec, err := agentrun.CompileSession(p, host)
	if err != nil {
		return fail(stderr, "create: %v", err)
	}
	cfg, err := json.Marshal(session.HolderConfig{ID: id, Spec: spec, IdleTimeoutMS: idle.Milliseconds()})
	if err != nil {
		return fail(stderr, "create: %v", err)
	}
	ready, err := startHolder(cfg)
	if err != nil {
		return fail(stderr, "create: %v", err)
	}
	if !ready.OK {
		return fail(stderr, "create: %s", ready.Error)
	}
	if *asJSON {
		b, _ := json.Marshal(ready)
		fmt.Fprintln(stdout, string(b))
	}
	return 0
}

// startHolder starts this binary as the session's holder, detached (a
// session of its own, cwd /), reads its ready line and acknowledges it.
// The holder deletes the session itself if this process dies before the
// acknowledgement.
func startHolder(cfg []byte) (session.Ready, error) {
	self, err := os.Executable()
	if err != nil {
		return session.Ready{}, err
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return session.Ready{}, fmt.Errorf("socketpair: %w", err)
	}
	rd, wr := os.NewFile(uintptr(pair[0]), "ready"), os.NewFile(uintptr(pair[1]), "ready-holder")
	defer rd.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		wr.Close()
		return session.Ready{}, err
	}
	defer null.Close()
	cmd := &exec.Cmd{
		Path: self, Args: []string{"agentrun", holderVerb}, Dir: "/",
		Stdin: bytes.NewReader(cfg), Stdout: null, Stderr: null, ExtraFiles: []*os.File{wr},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	// Only fds 0-2 and the ready socket reach the holder: descriptors this
	// process inherited without close-on-exec would otherwise live as
	// long as the session (a pipe of the caller's shell held open).
	_ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	err = cmd.Start()
	wr.Close()
	if err != nil {
		return session.Ready{}, fmt.Errorf("start the session holder: %w", err)
	}
	// The holder outlives this process; its stdin is written by a
	// goroutine of cmd, done once the holder has read the config.
	go func() { _ = cmd.Wait() }()
	line, err := bufio.NewReader(rd).ReadBytes('\n')
	if err != nil {
		return session.Ready{}, errors.New("the session holder ended without a word")
	}
	var r session.Ready
	if err := json.Unmarshal(line, &r); err != nil {
		return session.Ready{}, fmt.Errorf("the session holder said %q", line)
	}
	if r.OK {
		if _, err := rd.Write([]byte{session.Ack}); err != nil {
			return session.Ready{}, fmt.Errorf("acknowledge the session holder: %w", err)
		}
	}
	return r, nil
}

// dial connects to session id, or prints why not (125).
func dial(ctx context.Context, verb, id string, stderr io.Writer) (*session.Client, int) {
	r, err := lifecycle.Load(lifecycle.StateDir(os.Geteuid()), id)
	if errors.Is(err, lifecycle.ErrNotFound) {
		return nil, fail(stderr, "%s: session %q does not exist", verb, id)
	}
	if err != nil {
		return nil, fail(stderr, "%s: %v", verb, err)
	}
	if !r.Serve || r.Socket == "" {
		return nil, fail(stderr, "%s: %q is not a session", verb, id)
	}
	if r.State == lifecycle.Stopped {
		return nil, fail(stderr, "%s: session %q is not running", verb, id)
	}
	c, err := session.Dial(ctx, r.Socket)
	if err != nil {
		if !r.Owner.Alive() {
			_, _ = sweep(lifecycle.StateDir(os.Geteuid()), false)
			return nil, fail(stderr, "%s: session %q is not running", verb, id)
		}
		return nil, fail(stderr, "%s: session %q: %v", verb, id, err)
	}
	return c, 0
}

func execCmd(args []string, stdout, stderr io.Writer) int {
	const usage = "exec [-d] [-t] [--cwd DIR] [--env K=V] [--timeout D] ID -- CMD [ARG...]"
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	detach := fs.Bool("d", false, "detach: start the command and return; its stdio is /dev/null")
	tty := fs.Bool("t", false, "run the command on a terminal of the sandbox's own, as its controlling terminal (job control, Ctrl-C, window size); stdin must be a terminal")
	cwd := fs.String("cwd", "", "working directory (default: the session's)")
	var env listFlag
	fs.Var(&env, "env", "set K=V in the command's environment (repeatable)")
	timeout := fs.Duration("timeout", 0, "kill the command's process group after this long (exit 124)")
	if code, ok := parseVerb(fs, args, usage, stderr); !ok {
		return code
	}
	id, argv := fs.Arg(0), fs.Args()
	if len(argv) > 1 {
		argv = argv[1:]
		if argv[0] == "--" {
			argv = argv[1:]
		}
	}
	if fs.NArg() < 2 || len(argv) == 0 {
		fmt.Fprintf(stderr, "agentrun: exec: want a session ID and a command\nusage: agentrun %s\n", usage)
		return 2
	}
	if err := lifecycle.ValidID(id); err != nil {
		fmt.Fprintf(stderr, "agentrun: exec: %v\n", err)
		return 2
	}
	if *timeout < 0 {
		fmt.Fprintf(stderr, "agentrun: exec: --timeout %s: want a positive duration\n", *timeout)
		return 2
	}
	if *tty && *detach {
		fmt.Fprintln(stderr, "agentrun: exec: -t and -d do not go together: a detached command has no terminal to talk to")
		return 2
	}
	var term *terminal
	if *tty {
		var err error
		if term, err = openTerminal(); err != nil {
			return fail(stderr, "exec -t: %v", err)
		}
		defer term.restore()
	}
	ctx := context.Background()
	c, code := dial(ctx, "exec", id, stderr)
	if c == nil {
		return code
	}
	defer c.Close()
	r := session.ExecRequest{Args: argv, Cwd: *cwd, Env: env, Timeout: *timeout}
	switch {
	case *detach:
		r.Detach = true
	case term != nil:
		// Keys, Ctrl-C included, go to the terminal as bytes; its line
		// discipline signals the command's foreground group.
		r.Stdin, r.Stdout = os.Stdin, os.Stdout
		r.TTY = term.size()
	default:
		// A terminal is relayed, never passed: in a session a background
		// process would keep it after this exec (session.stdioFD).
		r.Stdin, r.Stdout, r.Stderr = relayTerminal(os.Stdin), relayTerminal(os.Stdout), relayTerminal(os.Stderr)
	}
	// Signals are taken before the start, so that none is lost; they go
	// to the command's process group.
	sigs := make(chan os.Signal, 4)
	if !*detach {
		// The signals a spawn passes on, but SIGWINCH, which -t turns
		// into a resize and which means nothing to a command on pipes.
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	}
	winch := make(chan os.Signal, 1)
	if term != nil {
		signal.Notify(winch, syscall.SIGWINCH)
		if err := term.raw(); err != nil {
			return fail(stderr, "exec -t: %v", err)
		}
	}
	p, err := c.Exec(ctx, r)
	if err != nil {
		term.restore()
		return fail(stderr, "exec: %v", err)
	}
	if *detach {
		return 0
	}
	for {
		select {
		case <-winch:
			if ws := term.size(); ws != nil {
				_ = p.Resize(*ws)
			}
		case s := <-sigs:
			_ = p.Signal(s.(syscall.Signal), true)
		case <-p.Done():
			info := p.Wait()
			term.restore()
			if info.Error != "" {
				return fail(stderr, "exec: %s", info.Error)
			}
			if info.TimedOut {
				fmt.Fprintf(stderr, "agentrun: exec: timed out after %s; its process group was killed\n", *timeout)
			}
			return info.Code
		}
	}
}

// sessionState is the state verb's output: runc's state fields, and the
// session's own.
type sessionState struct {
	OCIVersion string    `json:"ociVersion"`
	ID         string    `json:"id"`
	Pid        int       `json:"pid"`
	Status     string    `json:"status"`
	Bundle     string    `json:"bundle"`
	Rootfs     string    `json:"rootfs"`
	Created    time.Time `json:"created"`
	Owner      string    `json:"owner"`
	Socket     string    `json:"socket,omitempty"`
	*session.StateInfo
}

func listCmd(args []string, stdout, stderr io.Writer) int {
	const usage = "list [--format table|json]"
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	format := fs.String("format", "table", "table or json")
	fs.BoolVar(new(bool), "quiet", false, "")
	if code, ok := parseVerb(fs, args, usage, stderr); !ok {
		return code
	}
	if *format != "table" && *format != "json" {
		fmt.Fprintf(stderr, "agentrun: list: --format %q: want table or json\n", *format)
		return 2
	}
	_, _ = sweep(lifecycle.StateDir(os.Geteuid()), true)
	list, err := agentrun.ListSessions()
	if err != nil && list == nil {
		return fail(stderr, "list: %v", err)
	}
	if *format == "json" {
		out := make([]sessionState, 0, len(list))
		for _, s := range list {
			out = append(out, sessionState{OCIVersion: ociVersion, ID: s.Name, Pid: s.Pid, Status: string(s.State), Rootfs: "/", Created: s.Created, Owner: strconv.Itoa(os.Geteuid()), Socket: s.Socket})
		}
		b, _ := json.Marshal(out)
		fmt.Fprintln(stdout, string(b))
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPID\tSTATUS\tCREATED")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", s.Name, s.Pid, s.State, s.Created.Format(time.RFC3339))
	}
	tw.Flush()
	return 0
}

// ociVersion is the runtime-spec version of the state output.
const ociVersion = "1.0.2"

func stateCmd(args []string, stdout, stderr io.Writer) int {
	const usage = "state ID"
	fs := flag.NewFlagSet("state", flag.ContinueOnError)
	if code, ok := parseVerb(fs, args, usage, stderr); !ok {
		return code
	}
	id, code, ok := oneID(fs, usage, stderr)
	if !ok {
		return code
	}
	dir := lifecycle.StateDir(os.Geteuid())
	_, _ = sweep(dir, false)
	r, err := lifecycle.Load(dir, id)
	if errors.Is(err, lifecycle.ErrNotFound) {
		return fail(stderr, "state: session %q does not exist", id)
	}
	if err != nil {
		return fail(stderr, "state: %v", err)
	}
	st := sessionState{OCIVersion: ociVersion, ID: id, Status: string(r.State), Rootfs: "/", Created: r.Created, Owner: strconv.Itoa(os.Geteuid()), Socket: r.Socket}
	if r.Init != nil {
		st.Pid = r.Init.PID
	}
	if r.Serve && r.State == lifecycle.Running {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if c, err := session.Dial(ctx, r.Socket); err == nil {
			if info, err := c.State(ctx); err == nil {
				st.StateInfo = &info
			}
			c.Close()
		}
	}
	b, _ := json.MarshalIndent(st, "", "  ")
	fmt.Fprintln(stdout, string(b))
	return 0
}

func killCmd(args []string, stdout, stderr io.Writer) int {
	const usage = "kill ID [SIGNAL]"
	fs := flag.NewFlagSet("kill", flag.ContinueOnError)
	fs.BoolVar(new(bool), "all", false, "signal every process (what kill does to a session in any case)")
	if code, ok := parseVerb(fs, args, usage, stderr); !ok {
		return code
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		fmt.Fprintf(stderr, "agentrun: kill: want a session ID and at most one signal\nusage: agentrun %s\n", usage)
		return 2
	}
	if err := lifecycle.ValidID(fs.Arg(0)); err != nil {
		fmt.Fprintf(stderr, "agentrun: kill: %v\n", err)
		return 2
	}
	sig := int(syscall.SIGTERM)
	if fs.NArg() == 2 {
		var err error
		if sig, err = session.ParseSignal(fs.Arg(1)); err != nil {
			fmt.Fprintf(stderr, "agentrun: kill: %v\n", err)
			return 2
		}
	}
	ctx := context.Background()
	c, code := dial(ctx, "kill", fs.Arg(0), stderr)
	if c == nil {
		return code
	}
	defer c.Close()
	if err := c.Kill(ctx, syscall.Signal(sig)); err != nil {
		return fail(stderr, "kill: %v", err)
	}
	return 0
}

func deleteCmd(args []string, stdout, stderr io.Writer) int {
	const usage = "delete [-f] ID"
	fs := flag.NewFlagSet("delete", flag.ContinueOnError)
	force := fs.Bool("f", false, "kill the session's holder if it does not answer")
	fs.BoolVar(force, "force", false, "the same as -f")
	if code, ok := parseVerb(fs, args, usage, stderr); !ok {
		return code
	}
	id, code, ok := oneID(fs, usage, stderr)
	if !ok {
		return code
	}
	dir := lifecycle.StateDir(os.Geteuid())
	r, err := lifecycle.Load(dir, id)
	if errors.Is(err, lifecycle.ErrNotFound) {
		return fail(stderr, "delete: session %q does not exist", id)
	}
	if err != nil {
		return fail(stderr, "delete: %v", err)
	}
	if !r.Serve {
		return fail(stderr, "delete: %q is not a session", id)
	}
	if r.State == lifecycle.Stopped {
		// Its init is gone. A holder still alive is taking the rest down
		// (or, forced, is killed); then the sweep removes what is left.
		if r.Owner.Alive() {
			deadline := time.Now().Add(5 * time.Second)
			for r.Owner.Alive() && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if r.Owner.Alive() {
				if !*force || !r.Holder {
					return fail(stderr, "delete: the holder of session %q (process %d) does not end; delete -f kills an agentrun holder", id, r.Owner.PID)
				}
				if err := r.KillOwner(); err != nil {
					return fail(stderr, "delete: %v", err)
				}
			}
		}
		if _, err := sweep(dir, true); err != nil {
			return fail(stderr, "delete: %v", err)
		}
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c, err := session.Dial(ctx, r.Socket); err == nil {
		err = c.Delete(ctx)
		c.Close()
		if err == nil {
			return 0
		}
		if !*force {
			return fail(stderr, "delete: %v", err)
		}
	} else if !*force {
		return fail(stderr, "delete: session %q does not answer (%v); delete -f kills its holder", id, err)
	}
	// Forced: the holder is killed; the sweep then ends its init and
	// removes what it held.
	if err := r.KillOwner(); err != nil {
		return fail(stderr, "delete: %v", err)
	}
	if _, err := sweep(dir, true); err != nil {
		return fail(stderr, "delete: %v", err)
	}
	return 0
}
