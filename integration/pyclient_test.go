//go:build linux

package integration

// The session protocol from another language: a Python client written
// from docs/session-protocol.md alone (testdata/session_client.py,
// standard library only) drives a session made by the CLI through a
// developer's day: a dev server left running, reached by a later command,
// files passed both ways through resolved host paths, a denied call seen
// as an event, a descriptor passed, and the session deleted with nothing
// left behind.

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sessionClientPy is the client. It is embedded rather than read from the
// source tree: a test binary run as another user (.ci/as-user) or shipped
// into a VM (make vmtest) may have no readable testdata/ beside it.
//
//go:embed testdata/session_client.py
var sessionClientPy []byte

// systemPython is the python3 the sessions' commands find too (the
// suite's PATH), or skips the test saying why.
func systemPython(t *testing.T) string {
	t.Helper()
	var py string
	for _, d := range filepath.SplitList(sandboxPath) {
		if p := filepath.Join(d, "python3"); exists(p) {
			py = p
			break
		}
	}
	if py == "" {
		t.Skipf("no python3 in %s (.ci/setup.sh installs Debian's python3)", sandboxPath)
	}
	// socket.send_fds is Python 3.9.
	out, err := exec.Command(py, "-c", "import sys; print(sys.version_info >= (3, 9))").CombinedOutput()
	if err != nil {
		t.Skipf("%s does not run as uid %d: %v\n%s", py, os.Geteuid(), err, out)
	}
	if strings.TrimSpace(string(out)) != "True" {
		t.Skipf("%s is older than Python 3.9, which the client needs (socket.send_fds)", py)
	}
	return py
}

// pyStep is what the client reports of one step; the fields are those
// the test checks on its own.
type pyStep struct {
	OK       bool            `json:"ok"`
	Error    string          `json:"error"`
	StateDir string          `json:"state_dir"`
	Socket   string          `json:"socket"`
	Hello    json.RawMessage `json:"hello"`
	HostPath string          `json:"host_path"`
	Read     string          `json:"read"`
	Event    *struct {
		Kind   string `json:"kind"`
		Action string `json:"action"`
	} `json:"event"`
	Exit *struct {
		Code    int    `json:"code"`
		Aborted bool   `json:"aborted"`
		Error   string `json:"error"`
	} `json:"exit"`
	Reply *struct {
		Type string `json:"type"`
	} `json:"reply"`
}

// TestSessionProtocolPython: every step of the scenario passes, as the
// client sees it and as the test checks from outside, and the delete
// leaves no record, socket, holder, init or cgroup.
func TestSessionProtocolPython(t *testing.T) {
	py := systemPython(t)
	s := newSession(t, sessOpts{})
	rec := s.record(t) // its init is the pid create printed
	dir := tempDir(t)
	script := filepath.Join(dir, "session_client.py")
	writeFile(t, script, string(sessionClientPy), 0o644)

	steps := []string{"hello", "devserver", "fetch", "state", "write", "read", "violation", "fd", "tty", "stopserver", "delete"}
	marker := token("py-")
	// The session has a network namespace of its own: any port is free.
	port := 20000 + int(time.Now().UnixNano()%20000)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a hang guard
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{script, "--port", strconv.Itoa(port), "--marker", marker, s.id}, steps...)...)
	// The environment of the CLI that made the session (startCLI), so that
	// the client finds the same state directory.
	cmd.Env = []string{"PATH=" + sandboxPath, "LANG=C"}
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	t.Logf("python client: %v\n%s", runErr, stdout.String())

	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var out struct {
		OK          bool                       `json:"ok"`
		Steps       map[string]json.RawMessage `json:"steps"`
		StrayErrors []json.RawMessage          `json:"stray_errors"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &out); err != nil {
		t.Fatalf("the client printed no JSON line (%v; exit: %v)\nstdout:\n%s\nstderr:\n%s", err, runErr, stdout.String(), stderr.String())
	}
	got := map[string]pyStep{}
	for _, name := range steps {
		raw, ok := out.Steps[name]
		if !ok {
			t.Errorf("step %s: not reported", name)
			continue
		}
		var st pyStep
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Errorf("step %s: %v\n%s", name, err, raw)
			continue
		}
		if !st.OK {
			t.Errorf("step %s failed: %s", name, raw)
		}
		got[name] = st
	}
	if runErr != nil || !out.OK {
		t.Errorf("the client: %v, ok %v\nstderr:\n%s", runErr, out.OK, stderr.String())
	}
	if len(out.StrayErrors) > 0 {
		t.Errorf("error replies that answered no request of the client: %s", out.StrayErrors)
	}

	// What the client found and did, checked from outside.
	if h := got["hello"]; h.StateDir != s.dir || h.Socket != s.socket {
		t.Errorf("the client found the state directory %q and the socket %q, create made %q and %q", h.StateDir, h.Socket, s.dir, s.socket)
	}
	ws, err := filepath.EvalSymlinks(s.ws)
	if err != nil {
		t.Fatal(err)
	}
	for name, file := range map[string]string{"write": "x", "read": "y"} {
		if p := got[name].HostPath; p != filepath.Join(ws, file) {
			t.Errorf("step %s: /workspace/%s resolved to %q, want %q", name, file, p, filepath.Join(ws, file))
		}
	}
	for file, want := range map[string]string{"x": marker + "-host-to-sandbox", "y": marker + "-sandbox-to-host"} {
		if b, err := os.ReadFile(filepath.Join(ws, file)); err != nil || string(b) != want {
			t.Errorf("the workspace's %s holds %q (%v), want %q", file, b, err, want)
		}
	}
	if e := got["violation"].Event; e == nil || e.Kind != "violation" || e.Action != "unshare" {
		t.Errorf("no violation event for unshare: %+v", e)
	}
	if r := got["fd"].Read; r != marker+"-through-a-descriptor\n" {
		t.Errorf("the passed pipe carried %q", r)
	}
	if e := got["stopserver"].Exit; e == nil || !e.Aborted || e.Code != 137 {
		t.Errorf("the dev server's end, waited for from another connection: %+v, want aborted with 137", e)
	}
	if r := got["delete"].Reply; r == nil || r.Type != "ok" {
		t.Errorf("delete's reply: %+v", r)
	}

	// Nothing is left: the record in the state directory, the socket, the
	// holder, the init create reported, the cgroups.
	var left []string
	if !until(10*time.Second, func() bool { left = s.leftovers(rec); return len(left) == 0 }) {
		t.Errorf("left after the client's delete (init %d, state directory %s): %v", s.pid, s.dir, left)
	}
}
