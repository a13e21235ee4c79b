//go:build linux

package lifecycle

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentrun/agentrun/internal/procid"
)

// TestSweepSparesFreshRecord races a Sweep against a creator of the same
// ID whose old owner died: both read the dead record, but the record the
// creator makes in its place must survive the Sweep.
func TestSweepSparesFreshRecord(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sandboxes")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	self, err := procid.Self()
	if err != nil {
		t.Fatal(err)
	}
	dead := exec.Command("/bin/true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale, err := json.Marshal(Record{Version: recordVersion, ID: "x", State: Running,
		Owner: procid.ID{PID: dead.Process.Pid, Start: 1, PidNS: self.PidNS}})
	if err != nil {
		t.Fatal(err)
	}
	path := recordPath(dir, "x")
	for i := range 300 {
		if err := os.WriteFile(path, stale, 0o600); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); _, _ = Sweep(dir) }()
		var cerr error
		go func() {
			defer wg.Done()
			_, cerr = createRecord(dir, &Record{Version: recordVersion, ID: "x", State: Creating, Owner: self})
		}()
		wg.Wait()
		if cerr != nil {
			t.Fatalf("round %d: the creator: %v", i, cerr)
		}
		r, err := readRecord(path)
		if err != nil || r.Owner != self {
			t.Fatalf("round %d: the fresh record was lost to the Sweep: %+v %v", i, r, err)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRecordDirMustBePrivate refuses to read records from a directory
// others may write to: what they say steers signals.
func TestRecordDirMustBePrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sandboxes")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := List(dir); err == nil {
		t.Error("List read a world-writable directory")
	}
	if _, err := Load(dir, "x"); err == nil {
		t.Error("Load read a world-writable directory")
	}
	if _, err := Sweep(dir); err == nil {
		t.Error("Sweep acted on a world-writable directory")
	}
}

// TestValidID: the ids a sandbox may have, and some it may not.
func TestValidID(t *testing.T) {
	for _, id := range []string{"a", "0", "a.b_c-d", "A9", strings.Repeat("x", 128)} {
		if err := ValidID(id); err != nil {
			t.Errorf("ValidID(%q): %v", id, err)
		}
	}
	for _, id := range []string{"", "_a", ".a", "-a", "a..b", "a/b", "a b", "a\x00", "é", strings.Repeat("x", 129)} {
		if ValidID(id) == nil {
			t.Errorf("ValidID(%q) accepted it", id)
		}
	}
}
