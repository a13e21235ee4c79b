//go:build linux

// Command runas is the vmtest harness's privilege-drop helper. It runs as
// root inside the test VM, optionally moves itself into a cgroup (which
// needs root when the source and destination cgroups only share root-owned
// ancestors), drops to the given uid/gid with a single supplementary group,
// and execs the command. After it, the command holds no capabilities: every
// uid changes from 0, so the kernel clears the permitted and effective sets.
//
// Usage: runas -uid N -gid N [-cgroup DIR] -- CMD [ARG...]
//
// Busybox's su and setpriv cannot do this here: Debian's busybox setpriv has
// no --reuid, and su goes through a login shell and rewrites the environment.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

func main() {
	uid := flag.Int("uid", -1, "user id to run as")
	gid := flag.Int("gid", -1, "group id to run as (also the only supplementary group)")
	cgroup := flag.String("cgroup", "", "cgroup v2 directory to join before dropping privileges")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: runas -uid N -gid N [-cgroup DIR] -- CMD [ARG...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *uid < 0 || *gid < 0 || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*uid, *gid, *cgroup, flag.Args()); err != nil {
		fmt.Fprintf(os.Stderr, "runas: %v\n", err)
		os.Exit(126)
	}
}

func run(uid, gid int, cgroup string, argv []string) error {
	if cgroup != "" {
		procs := filepath.Join(cgroup, "cgroup.procs")
		if err := os.WriteFile(procs, []byte("0"), 0); err != nil {
			return fmt.Errorf("joining cgroup: %w", err)
		}
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	// Order matters: groups and gid can only be changed while still uid 0.
	// Go applies these to every thread of the process.
	if err := syscall.Setgroups([]int{gid}); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(gid, gid, gid); err != nil {
		return fmt.Errorf("setresgid(%d): %w", gid, err)
	}
	if err := syscall.Setresuid(uid, uid, uid); err != nil {
		return fmt.Errorf("setresuid(%d): %w", uid, err)
	}
	return syscall.Exec(path, argv, os.Environ())
}
