package darwin

import (
	"fmt"
	"sort"
	"strconv"
)

// emitBase writes the header and everything that does not depend on paths.
func (b *builder) emitBase() {
	b.line("(version 1)")
	b.line("(deny default " + b.withMessage() + ")")

	b.comment("processes: children inherit this profile, so exec and fork stay inside it")
	b.line("(allow process-exec)")
	b.line("(allow process-fork)")
	b.comment("setuid and setgid programs would run with privileges the caller lacks")
	b.rule("deny", "process-exec*", []string{"(require-any (file-mode #o4000) (file-mode #o2000))"}, true)
	b.line("(allow signal (target same-sandbox))")
	b.line("(allow process-info* (target same-sandbox))")

	b.comment("machine facts runtimes read at start-up; no process tables")
	b.rule("allow", "sysctl-read", append(quoted("sysctl-name", sysctlNames[:]), quoted("sysctl-name-prefix", sysctlPrefixes[:])...), false)

	b.comment("user and group lookups, notifications, logging")
	b.rule("allow", "mach-lookup", quoted("global-name", machBase[:]), false)
	b.comment("POSIX semaphores (Python multiprocessing locks)")
	b.line("(allow ipc-posix-sem)")
	b.comment("unix sockets: creation and socketpair; paths are granted per directory below")
	b.line("(allow system-socket (socket-domain AF_UNIX))")
}

// emitFiles writes the filesystem rules: system locations, devices,
// metadata for path traversal, then the grants in depth order.
func (b *builder) emitFiles(pl *plan) {
	b.comment("system locations, read-only")
	sysDirs := append(append([]string{}, systemReadDirs[:]...), pl.extraSys...)
	b.rule("allow", "file-read* file-map-executable", b.pathFilters("subpath", "SYS", sysDirs), false)
	b.rule("allow", "file-read*", b.pathFilters("literal", "SYSFILE", systemReadFiles[:]), false)

	b.comment("metadata of every directory above a granted path, so realpath and getcwd work")
	b.rule("allow", "file-read-metadata", b.pathFilters("literal", "META", metadataPaths(pl)), false)

	b.emitDevices(pl)

	b.comment("workspace, per-run directories and mounts, shallow to deep: the deepest grant wins")
	b.emitGrants(pl.grants, pl.grants)

	b.comment("unix sockets inside the per-run directories only")
	b.rule("allow", "network-bind", b.socketFilters("local", pl.temps), false)
	b.rule("allow", "network-outbound", b.socketFilters("remote", pl.temps), false)
}

func (b *builder) emitDevices(pl *plan) {
	b.comment("devices")
	b.rule("allow", "file-read* file-write-data file-ioctl", b.pathFilters("literal", "DEV", devReadWrite[:]), false)
	b.rule("allow", "file-read* file-ioctl", b.pathFilters("literal", "DEV", devReadOnly[:]), false)
	fd := append(b.pathFilters("subpath", "DEV", []string{devFDDir}), b.pathFilters("literal", "DEV", devFDLinks[:])...)
	b.rule("allow", "file-read* file-write-data", fd, false)
	b.comment("ptys the command allocates itself; other ttys stay closed")
	b.line("(allow pseudo-tty)")
	b.rule("allow", "file-read* file-write-data file-ioctl", b.pathFilters("literal", "DEV", []string{devPTMX}), false)
	b.rule("allow", "file-read* file-write-data file-ioctl", []string{
		`(require-all (regex #"` + ptySlavePattern + `") (extension "com.apple.sandbox.pty"))`,
	}, false)
	if len(pl.terminals) > 0 {
		b.comment("the caller's own terminal, inherited on stdio")
		ops := "file-read* file-write-data"
		if pl.spec.TerminalIoctl {
			ops += " file-ioctl"
		}
		b.rule("allow", ops, b.pathFilters("literal", "TTY", pl.terminals), false)
	}
}

// emitGrants writes one rule per grant. A read-only grant inside a writable
// one also denies writes, which is what makes it read-only. all is the
// complete grant list, used to decide that.
func (b *builder) emitGrants(gs, all []grant) {
	for _, g := range gs {
		if g.writable {
			b.rule("allow", "file-read* file-map-executable file-write*", b.pathFilters("subpath", grantRole(g), []string{g.path}), false)
			continue
		}
		b.rule("allow", "file-read* file-map-executable", b.pathFilters("subpath", grantRole(g), []string{g.path}), false)
		if insideWritable(g, all) {
			b.rule("deny", "file-write*", b.pathFilters("subpath", grantRole(g), []string{g.path}), true)
		}
	}
}

func grantRole(g grant) string {
	switch {
	case g.explicit && g.writable:
		return "RW"
	case g.explicit:
		return "RO"
	}
	return "TMP"
}

func insideWritable(g grant, all []grant) bool {
	for _, w := range all {
		if w.writable && w.path != g.path && within(g.path, w.path) {
			return true
		}
	}
	return false
}

func (b *builder) socketFilters(side string, dirs []string) []string {
	out := make([]string, 0, len(dirs))
	for _, d := range dirs {
		out = append(out, "("+side+" unix-socket (subpath "+b.param("TMP", d)+"))")
	}
	return out
}

// emitNetwork writes the rules of the network mode. None writes nothing:
// the default deny already covers every socket operation, and any
// (local ip ...) filter on an outbound rule would match every connection.
func (b *builder) emitNetwork(pl *plan) {
	switch pl.spec.Network {
	case NetworkHost:
		b.comment("network: host")
		b.line(`(allow network-outbound (remote ip "*:*"))`)
		b.line(`(allow network-bind (local ip "*:*"))`)
		b.line(`(allow network-inbound (local ip "*:*"))`)
		b.rule("allow", "network-outbound", []string{"(remote unix-socket (subpath " + b.param("SOCK", mDNSResponderSocket) + "))"}, false)
		b.line("(allow system-socket (require-all (socket-domain AF_SYSTEM) (socket-protocol 2)))")
		b.rule("allow", "mach-lookup", quoted("global-name", machHostNetwork[:]), false)
	case NetworkProxy:
		b.comment("network: the filtering proxy only; it resolves names, so no DNS here")
		b.line(`(allow network-outbound (remote ip "localhost:` + strconv.Itoa(pl.spec.ProxyPort) + `"))`)
	default:
		b.comment("network: none")
	}
}

// emitSecrets comes last among the denies so no grant above can reopen a
// secret. Explicit grants that lie inside a secret are then written again:
// the caller named them, so they win, and a warning says so.
func (b *builder) emitSecrets(pl *plan) {
	b.comment("secrets: unreadable and unwritable whatever grant covers them")
	b.rule("deny", "file-read* file-write*", b.pathFilters("subpath", "SECRET", pl.secrets), true)
	if guards := guardPaths(pl); len(guards) > 0 {
		b.comment("their directories inside writable grants cannot be moved, replaced or created")
		b.rule("deny", "file-write-unlink file-write-create", b.pathFilters("literal", "GUARD", guards), true)
	}

	var again []grant
	for _, g := range pl.grants {
		if s, ok := secretCovering(g.path, pl.secrets); g.explicit && ok {
			again = append(again, g)
			b.warns = append(b.warns, fmt.Sprintf("%s is inside protected path %s; it is exposed because it was requested explicitly", g.path, s))
		}
	}
	if len(again) > 0 {
		b.comment("explicit grants inside secrets, and the metadata of the secret directories above them")
		b.emitGrants(again, pl.grants)
		b.rule("allow", "file-read-metadata", b.pathFilters("literal", "META", secretAncestors(again, pl.secrets)), false)
	}
}

// secretAncestors are the directories above the grants that a secret deny
// covers; without their metadata realpath fails on the granted path.
func secretAncestors(gs []grant, secrets []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, g := range gs {
		for _, a := range ancestors(g.path) {
			if _, ok := secretCovering(a, secrets); ok && !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	sort.Strings(out)
	return out
}

func secretCovering(p string, secrets []string) (string, bool) {
	for _, s := range secrets {
		if within(p, s) {
			return s, true
		}
	}
	return "", false
}

// guardPaths are the ancestors of secrets that a writable grant covers.
// Elsewhere the default deny already stops a rename or a planted symlink.
func guardPaths(pl *plan) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range pl.secrets {
		for _, a := range ancestors(s) {
			if !seen[a] && coveredByWritable(a, pl.grants) {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	sort.Strings(out)
	return out
}

func coveredByWritable(p string, gs []grant) bool {
	for _, g := range gs {
		if g.writable && within(p, g.path) {
			return true
		}
	}
	return false
}

// metadataPaths are the directories above every granted or system path,
// and the top-level symlinks, sorted for a stable profile.
func metadataPaths(pl *plan) []string {
	var roots []string
	roots = append(roots, systemReadDirs[:]...)
	roots = append(roots, systemReadFiles[:]...)
	roots = append(roots, pl.extraSys...)
	roots = append(roots, pl.terminals...)
	for _, g := range pl.grants {
		roots = append(roots, g.path)
	}
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, l := range systemLinks {
		add(l)
	}
	for _, r := range roots {
		for _, a := range ancestors(r) {
			add(a)
		}
	}
	sort.Strings(out)
	return out
}
