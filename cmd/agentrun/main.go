// The runtime's container-aware GOMAXPROCS reads cgroup files at every
// start and rechecks them in the background; a short-lived runtime whose
// work is one spawn gains nothing from either.

//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0

// Command agentrun runs commands in sandboxes. It is a thin layer over the
// agentrun package: flags become a Policy, the Policy runs, the Result
// becomes an exit status.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentrun/agentrun"
	"github.com/agentrun/agentrun/nsinit"
	"github.com/agentrun/agentrun/probe"
)

func main() {
	// The binary re-executed as a holder (nsinit.HoldCommand) takes this
	// path before anything else.
	nsinit.Dispatch()
	os.Exit(run(os.Args[1:], os.Stderr))
}

const usage = `usage: agentrun <command> [flags]

commands:
  spawn    run a command in a fresh sandbox
  create   start a session: a sandbox that lives across many commands
  exec     run a command in a session
  list     list your sessions
  state    print a session's state as JSON
  kill     signal every process of a session
  delete   end a session and remove what it held
  probe    report what this host offers and whether the default policy holds
  version  print the version

run 'agentrun COMMAND -h' for a command's flags
`

func run(args []string, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "spawn":
		return spawn(args[1:], stderr)
	case "probe":
		return probeCmd(args[1:], os.Stdout, stderr)
	case "version", "--version":
		fmt.Println("agentrun", version)
		return 0
	case "help", "-h", "--help":
		fmt.Print(usage)
		return 0
	}
	if verb, ok := sessionVerbs[args[0]]; ok {
		return verb(args[1:], os.Stdout, stderr)
	}
	fmt.Fprintf(stderr, "agentrun: unknown command %q\n%s", args[0], usage)
	return 2
}

const version = "0.1.0-dev"

// forwarded are the signals the CLI passes on to a spawn's command.
var forwarded = []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

// fastConfig is what the spawn's flags say of the CLI's fast path
// (fastpath.Config): record, the express path is on; eligible, the
// spawn's outcome is its exit status alone.
type fastConfig struct{ record, eligible bool }

// fail prints the one-line reason and returns the setup-failure status.
func fail(stderr io.Writer, format string, a ...any) int {
	fmt.Fprintf(stderr, "agentrun: "+format+"\n", a...)
	return agentrun.ExitSetupFailed
}

func spawn(args []string, stderr io.Writer) int {
	// An init the constructor started that this spawn did not take (a
	// refused command line or policy) ends here, not only at exit.
	defer discardPrestart()
	opts, err := parseSpawn(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		code := fail(stderr, "%v", err)
		writeResult(opts, &agentrun.Result{ExitCode: code, Error: err.Error()}, stderr)
		return code
	}
	ropts := agentrun.Options{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Warn: func(m string) { fmt.Fprintf(stderr, "agentrun: warning: %s\n", m) },
		// Only --result shows usage figures, and only it and --verbose
		// show violations.
		SkipUsage:      opts.result == "",
		SkipViolations: opts.result == "" && !opts.verbose,
	}
	// AGENTRUN_EXPRESS=0 turns the express path off (express.c): then
	// there is nothing to cache for it either. Its spawns give their exit
	// status and nothing else.
	record := opts.splitAtFirstDashDash && !slices.Contains([]string{"0", "off"}, os.Getenv("AGENTRUN_EXPRESS"))
	fast := fastConfig{record: record, eligible: record && opts.result == "" && !opts.verbose && opts.policy.Timeout == 0}
	if opts.verbose {
		ropts.OnViolation = func(v agentrun.Violation) {
			fmt.Fprintf(stderr, "agentrun: denied %s %s (%s)\n", v.Name, v.Detail, v.Suggestion)
		}
	}
	res, err := runSpawn(opts.policy, ropts, fast)
	if err != nil {
		code := fail(stderr, "%v", err)
		writeResult(opts, &agentrun.Result{ExitCode: code, Error: err.Error()}, stderr)
		return code
	}
	if res.TimedOut {
		fmt.Fprintf(stderr, "agentrun: timed out after %s; sandbox killed\n", time.Duration(opts.policy.Timeout))
	}
	if res.OOMKilled {
		what := "the command was killed"
		if res.Signal != int(syscall.SIGKILL) || res.TimedOut {
			what = "a process in the sandbox was killed"
		}
		if m := opts.policy.Limits.Memory; m > 0 {
			fmt.Fprintf(stderr, "agentrun: memory limit of %d bytes hit; %s\n", m, what)
		} else {
			fmt.Fprintf(stderr, "agentrun: out of memory; %s\n", what)
		}
	}
	writeResult(opts, res, stderr)
	return res.ExitCode
}

// probeCmd prints the host report (a table, or JSON with --json) and
// exits non-zero when the default policy cannot be enforced here.
func probeCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	r := probe.Probe()
	write := r.WriteTable
	if *asJSON {
		write = r.WriteJSON
	}
	if err := write(stdout); err != nil {
		fmt.Fprintf(stderr, "agentrun: probe: %v\n", err)
		return 1
	}
	if ok, missing := r.Enforceable(); !ok {
		fmt.Fprintf(stderr, "agentrun: the default policy cannot be enforced here: %s\n", strings.Join(missing, "; "))
		return 1
	}
	return 0
}

func writeResult(o *spawnOpts, res *agentrun.Result, stderr io.Writer) {
	if o == nil || o.result == "" {
		return
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	if err := writeResultFile(o.result, append(b, '\n')); err != nil {
		fmt.Fprintf(stderr, "agentrun: write result: %v\n", err)
	}
}

// writeResultFile writes the --result JSON. A regular file (or a new one)
// is replaced through a temporary file beside it, so that a reader never
// sees it half written, even if this process dies on the way; anything
// else (/dev/stdout, a FIFO) is written in place.
func writeResultFile(path string, data []byte) error {
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() {
		return os.WriteFile(path, data, 0o644)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	mask := syscall.Umask(0) // read it: CreateTemp's 0600 must become 0644 less the umask
	syscall.Umask(mask)
	_, werr := f.Write(data)
	if err := errors.Join(werr, f.Chmod(os.FileMode(0o644&^mask)), f.Close()); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}

type spawnOpts struct {
	policy  *agentrun.Policy
	result  string
	verbose bool
	// splitAtFirstDashDash reports whether the flags ended at the first
	// "--", where the constructor's cache key ends (prestart.c); otherwise
	// that "--" was a flag's value and the key misses flags, which the
	// express path must not trust.
	splitAtFirstDashDash bool
}

// flagsEndAtFirstDashDash reports whether args are flags (with their
// values) up to the first "--", which is then the terminator, not the
// value of a flag ("--workspace -- cmd").
func flagsEndAtFirstDashDash(fs *flag.FlagSet, args []string) bool {
	end := slices.Index(args, "--")
	if end < 0 {
		return false
	}
	for i := 0; i < end; i++ {
		name, hasValue := strings.TrimLeft(args[i], "-"), false
		if !strings.HasPrefix(args[i], "-") || name == "" || len(args[i])-len(name) > 2 {
			return false
		}
		if k := strings.IndexByte(name, '='); k >= 0 {
			name, hasValue = name[:k], true
		}
		f := fs.Lookup(name)
		if f == nil {
			return false
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); hasValue || (ok && b.IsBoolFlag()) {
			continue
		}
		if i++; i >= end {
			return false // the "--" is this flag's value
		}
	}
	return true
}

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// policyFlags are the flags that describe a sandbox, shared by spawn and
// create.
type policyFlags struct {
	ro, rw, tmpfsDest, env, capAdd    listFlag
	workspace, netMode, policyFile    string
	memory, pids, cpus, timeout       string
	nofile, nproc, fsize, cpuTimeFlag string
	seccompProfile                    string
}

// register adds the flags to fs; withTimeout adds --timeout, which only a
// spawn has (a session's commands each have their own).
func (f *policyFlags) register(fs *flag.FlagSet, withTimeout bool) {
	fs.StringVar(&f.workspace, "workspace", "", "host directory bound read-write at /workspace (default: current directory)")
	fs.Var(&f.ro, "ro", "bind host PATH[:DEST] read-only (repeatable)")
	fs.Var(&f.rw, "rw", "bind host PATH[:DEST] read-write (repeatable)")
	fs.Var(&f.tmpfsDest, "tmpfs", "mount an empty tmpfs at DEST (repeatable)")
	fs.StringVar(&f.netMode, "net", "", "network: none (default; loopback only) or host (shares the host network: weaker, host loopback services are reachable)")
	fs.StringVar(&f.memory, "memory", "", "memory limit, e.g. 512M")
	fs.StringVar(&f.pids, "pids", "", "maximum number of processes")
	fs.StringVar(&f.cpus, "cpus", "", "CPU limit in cores, e.g. 0.5")
	if withTimeout {
		fs.StringVar(&f.timeout, "timeout", "", "kill the sandbox after this duration (exit 124)")
	}
	fs.Var(&f.env, "env", "set K=V in the command's environment (repeatable)")
	fs.Var(&f.capAdd, "cap-add", "grant the command a capability, e.g. CAP_NET_RAW, held in the sandbox's user namespace only (repeatable; default none)")
	fs.StringVar(&f.policyFile, "policy", "", "read the policy from a JSON file; flags add to it")
	fs.StringVar(&f.seccompProfile, "seccomp-profile", "", "system-call filter: a profile file in OCI or Docker JSON format, or 'unconfined' (default: the built-in agent profile)")
	fs.StringVar(&f.nofile, "nofile", "", "RLIMIT_NOFILE for the command")
	fs.StringVar(&f.nproc, "nproc", "", "RLIMIT_NPROC for the command")
	fs.StringVar(&f.fsize, "fsize", "", "RLIMIT_FSIZE for the command, e.g. 100M")
	fs.StringVar(&f.cpuTimeFlag, "cpu-time", "", "RLIMIT_CPU for the command, e.g. 10s")
}

// policy builds the Policy: the --policy file ("-" is stdin, where
// stdin is given), then the flags on top.
func (f *policyFlags) policy(stdin io.Reader) (*agentrun.Policy, error) {
	p := &agentrun.Policy{}
	switch {
	case f.policyFile == "-" && stdin != nil:
		var err error
		if p, err = agentrun.ReadPolicy(stdin); err != nil {
			return nil, fmt.Errorf("--policy -: %w", err)
		}
	case f.policyFile != "":
		var err error
		if p, err = agentrun.LoadPolicyFile(f.policyFile); err != nil {
			return nil, err
		}
	}
	if f.workspace != "" {
		p.Workspace = f.workspace
	}
	if f.netMode != "" {
		p.Network = agentrun.NetworkMode(f.netMode)
	}
	if f.seccompProfile != "" {
		p.Seccomp = f.seccompProfile
	}
	for _, v := range f.ro {
		m, err := bindFlag(v, agentrun.MountRO)
		if err != nil {
			return nil, err
		}
		p.Mounts = append(p.Mounts, m)
	}
	for _, v := range f.rw {
		m, err := bindFlag(v, agentrun.MountRW)
		if err != nil {
			return nil, err
		}
		p.Mounts = append(p.Mounts, m)
	}
	for _, d := range f.tmpfsDest {
		p.Mounts = append(p.Mounts, agentrun.Mount{Dest: d, Mode: agentrun.MountTmpfs})
	}
	p.Env = append(p.Env, f.env...)
	p.CapAdd = append(p.CapAdd, f.capAdd...)
	if err := limitFlags(p, f.memory, f.pids, f.cpus, f.timeout, f.nofile, f.nproc, f.fsize, f.cpuTimeFlag); err != nil {
		return nil, err
	}
	return p, nil
}

func parseSpawn(args []string, stderr io.Writer) (*spawnOpts, error) {
	fs := flag.NewFlagSet("spawn", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var pf policyFlags
	pf.register(fs, true)
	var res string
	var verbose bool
	fs.StringVar(&res, "result", "", "write the result as JSON to this file")
	fs.BoolVar(&verbose, "verbose", false, "print a line for every denied system call")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stdout, "usage: agentrun spawn [flags] -- CMD [ARG...]")
			fs.SetOutput(os.Stdout)
			fs.PrintDefaults()
		}
		return nil, err
	}
	o := &spawnOpts{result: res, verbose: verbose, policy: &agentrun.Policy{}}
	o.splitAtFirstDashDash = flagsEndAtFirstDashDash(fs, args)
	p, err := pf.policy(nil)
	if err != nil {
		return o, err
	}
	o.policy = p
	if cmd := fs.Args(); len(cmd) > 0 {
		p.Command = cmd
	}
	if len(p.Command) == 0 {
		return o, errors.New("spawn: no command given (usage: agentrun spawn [flags] -- CMD [ARG...])")
	}
	return o, nil
}

// bindFlag parses PATH[:DEST]; DEST defaults to PATH.
func bindFlag(v string, mode agentrun.MountMode) (agentrun.Mount, error) {
	src, dest, ok := strings.Cut(v, ":")
	if src == "" || (ok && dest == "") {
		return agentrun.Mount{}, fmt.Errorf("--%s %q: want PATH[:DEST]", mode, v)
	}
	if !ok {
		dest = src
	}
	return agentrun.Mount{Source: src, Dest: dest, Mode: mode}, nil
}

func limitFlags(p *agentrun.Policy, memory, pids, cpus, timeout, nofile, nproc, fsize, cpuTime string) error {
	var err error
	if memory != "" {
		if p.Limits.Memory, err = agentrun.ParseByteSize(memory); err != nil {
			return fmt.Errorf("--memory: %w", err)
		}
	}
	if pids != "" {
		if p.Limits.Pids, err = strconv.ParseInt(pids, 10, 64); err != nil || p.Limits.Pids <= 0 {
			return fmt.Errorf("--pids %q: want a positive integer", pids)
		}
	}
	if cpus != "" {
		if p.Limits.CPUs, err = strconv.ParseFloat(cpus, 64); err != nil || p.Limits.CPUs <= 0 {
			return fmt.Errorf("--cpus %q: want a positive number of cores", cpus)
		}
	}
	if timeout != "" {
		d, err := time.ParseDuration(timeout)
		if err != nil || d <= 0 {
			return fmt.Errorf("--timeout %q: want a positive duration like 30s", timeout)
		}
		p.Timeout = agentrun.Duration(d)
	}
	if nofile != "" {
		if p.Limits.NoFile, err = strconv.ParseUint(nofile, 10, 64); err != nil {
			return fmt.Errorf("--nofile %q: want a non-negative integer", nofile)
		}
	}
	if nproc != "" {
		if p.Limits.NProc, err = strconv.ParseUint(nproc, 10, 64); err != nil {
			return fmt.Errorf("--nproc %q: want a non-negative integer", nproc)
		}
	}
	if fsize != "" {
		if p.Limits.FSize, err = agentrun.ParseByteSize(fsize); err != nil {
			return fmt.Errorf("--fsize: %w", err)
		}
	}
	if cpuTime != "" {
		d, err := time.ParseDuration(cpuTime)
		if err != nil || d <= 0 {
			return fmt.Errorf("--cpu-time %q: want a positive duration", cpuTime)
		}
		p.Limits.CPUTime = agentrun.Duration(d)
	}
	return nil
}
