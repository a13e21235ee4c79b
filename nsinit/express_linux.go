//go:build linux

package nsinit

// Express is what the CLI's constructor needs to run a spawn whose plan
// image it cached without the Go runtime: the express path
// (internal/cinit/express.c). Nothing in it is trusted unless each of
// Fingerprints still holds on the host when that spawn starts.
type Express struct {
	// Fingerprints are the plan's host inputs, one line each, in the
	// format express.c checks: "L\tPATH\t-" (lstat fails), "L\tPATH\tMODE
	// UID GID SIZE DEV INO" (tab-separated; SIZE of regular files only,
	// else 0), "R\tPATH\tTARGET" (readlink), "E\tPATH\tRESOLVED" or
	// "E\tPATH\t-" (every symlink resolved, or failing), "C\tHASH" (FNV-1a
	// 64 of /proc/self/cgroup, hex), "A\tPATH\tERRNO" (faccessat W_OK with
	// AT_EACCESS: 0, or the errno it fails with).
	Fingerprints []string
	// Signals are forwarded to the init from its start until its exit.
	Signals []int
	// The sandbox's v1 cgroup: created as CgroupDir/sbe-PID-START-PIDNS-
	// RANDOM with pids.max PidsMax; the name is its record for Sweep.
	// StateDir is only checked for stale records of Go's cgroups, and
	// CgroupParent (CgroupDir's base name) is kept for the record's format.
	StateDir, CgroupParent, CgroupDir string
	PidsMax                           int64
	// NoCgroup says the sandbox runs without a cgroup, as Go ran it, for the
	// reason the fingerprints hold; StateDir alone is set, for the
	// records a sweep would remove first.
	NoCgroup bool
}
