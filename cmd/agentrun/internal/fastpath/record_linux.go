//go:build linux && cgo

package fastpath

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentrun/agentrun/internal/statedir"
)

// Express is what the CLI's constructor needs to run a spawn whose plan
// image it cached without the Go runtime: the express path
// (express.c). Nothing in it is trusted unless each of
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

// expressSuffix names the express record next to its plan image.
const expressSuffix = ".express"

// expressRecord is the text express.c reads: the image it belongs to, the
// signals, the cgroup recipe, the release message and the fingerprints,
// one per line, fields separated by tabs. Nil when a value cannot be
// written that way.
func expressRecord(imageSum uint64, release []byte, x *Express) []byte {
	if len(x.Signals) == 0 || !filepath.IsAbs(x.StateDir) {
		return nil
	}
	if x.NoCgroup {
		if x.PidsMax != 0 || x.CgroupDir != "" || x.CgroupParent != "" {
			return nil
		}
	} else if x.PidsMax <= 0 || !filepath.IsAbs(x.CgroupDir) || x.CgroupParent == "" || strings.Contains(x.CgroupParent, "/") {
		return nil
	}
	for _, f := range []string{x.StateDir, x.CgroupParent, x.CgroupDir} {
		if strings.ContainsAny(f, "\t\n\x00") {
			return nil
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "agentrun-express 1\nimage %016x\nsignals", imageSum)
	for _, s := range x.Signals {
		fmt.Fprintf(&b, " %d", s)
	}
	if x.NoCgroup {
		fmt.Fprintf(&b, "\nno-cgroup\t%s", x.StateDir)
	} else {
		fmt.Fprintf(&b, "\ncgroup\t%s\t%s\t%s\t%d", x.StateDir, x.CgroupParent, x.CgroupDir, x.PidsMax)
	}
	fmt.Fprintf(&b, "\nrelease %s\n", hex.EncodeToString(release))
	for _, f := range x.Fingerprints {
		if strings.ContainsAny(f, "\n\x00") {
			return nil
		}
		b.WriteString(f)
		b.WriteByte('\n')
	}
	b.WriteString("end\n")
	return []byte(b.String())
}

// cacheImage stores img where the constructor of the next spawn with the
// same key looks for it. Best effort: a failure only costs the next spawn
// its head start.
func cacheImage(path string, img []byte) {
	dir := filepath.Dir(path)
	euid := os.Geteuid()
	if err := statedir.Ensure(dir, euid); err != nil {
		return
	}
	if ents, err := os.ReadDir(dir); err == nil && countImages(ents) >= maxImages {
		for _, e := range ents {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	writeCached(path, img)
}

// countImages counts the plan images among a cache directory's entries
// (not their express records).
func countImages(ents []os.DirEntry) int {
	n := 0
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), expressSuffix) {
			n++
		}
	}
	return n
}

// writeCached replaces path (in the private cache directory) with data.
func writeCached(path string, data []byte) {
	f, err := os.CreateTemp(filepath.Dir(path), ".image-")
	if err != nil {
		return
	}
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil && cerr == nil {
		werr = os.Rename(f.Name(), path)
	}
	if werr != nil {
		_ = os.Remove(f.Name())
	}
}

// maxImages bounds the cached images per user; beyond it the directory
// is emptied before the next one is written.
const maxImages = 256
