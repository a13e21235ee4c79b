package darwin

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func ndjson(t *testing.T, msg string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"timestamp": "2025-01-01 10:00:00.000000+0000", "messageType": "Error",
		"eventMessage": msg, "processImagePath": "/kernel", "processID": 0,
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseLogLine(t *testing.T) {
	for _, c := range []struct {
		name string
		line string
		want Denial
		ok   bool
	}{
		{
			name: "file read",
			line: ndjson(t, "Sandbox: cat(4242) deny(1) file-read-data /Users/alice/.ssh/id_ed25519\n"+testTag),
			want: Denial{Process: "cat", PID: 4242, Operation: "file-read-data", Target: "/Users/alice/.ssh/id_ed25519"}, ok: true,
		},
		{
			name: "process name with parentheses and spaces in target",
			line: ndjson(t, "Sandbox: Foo Helper (GPU)(77) deny(1) file-write-create /Users/alice/My Docs/x "+testTag),
			want: Denial{Process: "Foo Helper (GPU)", PID: 77, Operation: "file-write-create", Target: "/Users/alice/My Docs/x " + testTag}, ok: true,
		},
		{
			name: "no target",
			line: ndjson(t, "Sandbox: python3(9) deny(1) ipc-posix-shm-read-data\n"+testTag),
			want: Denial{Process: "python3", PID: 9, Operation: "ipc-posix-shm-read-data"}, ok: true,
		},
		{name: "another run", line: ndjson(t, "Sandbox: cat(1) deny(1) file-read-data /x\nagentrun_ffffffffffffffff")},
		{name: "duplicate summary", line: ndjson(t, "Sandbox: 3 duplicate reports for cat deny(1) file-read-data /x\n"+testTag)},
		{name: "not json", line: "Filtering the log data using \"eventMessage CONTAINS \\\"" + testTag + "\\\"\""},
		{name: "empty", line: ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := ParseLogLine([]byte(c.line), testTag)
			if ok != c.ok || got != c.want {
				t.Errorf("ParseLogLine = %+v, %v; want %+v, %v", got, ok, c.want, c.ok)
			}
		})
	}
}

func TestDenialViolation(t *testing.T) {
	for _, c := range []struct {
		d    Denial
		want Violation
	}{
		{Denial{"cat", 1, "file-read-data", "/Users/a/.ssh/k"}, Violation{"file-read", "/Users/a/.ssh/k", "file-read-data by cat(1)", "grant read access with --ro /Users/a/.ssh/k"}},
		{Denial{"sh", 2, "file-write-create", "/etc/x"}, Violation{"file-write", "/etc/x", "file-write-create by sh(2)", "grant write access with --rw /etc/x"}},
		{Denial{"curl", 3, "network-outbound", "1.2.3.4:443"}, Violation{"network", "1.2.3.4:443", "network-outbound by curl(3)", "the network is off; use --net host if the command needs it"}},
		{Denial{"git", 4, "mach-lookup", "com.apple.x"}, Violation{"ipc", "com.apple.x", "mach-lookup by git(4)", ""}},
		{Denial{"ps", 5, "sysctl-read", ""}, Violation{"sysctl", "sysctl-read", "sysctl-read by ps(5)", ""}},
		{Denial{"kill", 6, "signal", "1"}, Violation{"process", "1", "signal by kill(6)", ""}},
		{Denial{"x", 7, "iokit-open", "Foo"}, Violation{"seatbelt", "Foo", "iokit-open by x(7)", ""}},
	} {
		if got := c.d.Violation(); got != c.want {
			t.Errorf("Violation(%+v) = %+v, want %+v", c.d, got, c.want)
		}
	}
}

func TestLogStreamArgs(t *testing.T) {
	want := []string{"stream", "--style", "ndjson", "--predicate", `eventMessage CONTAINS "` + testTag + `"`}
	if got := LogStreamArgs(testTag); !slices.Equal(got, want) {
		t.Errorf("LogStreamArgs = %q", got)
	}
}

// fakeLog writes a stand-in for log(1) that records its arguments and runs
// body.
func fakeLog(t *testing.T, body string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	argsFile := filepath.Join(dir, "args")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + argsFile + "\n" + body + "\n"
	p := filepath.Join(dir, "log")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p, argsFile
}

func TestCollectorStreams(t *testing.T) {
	lines := []string{
		ndjson(t, "Sandbox: cat(1) deny(1) file-read-data /a\n"+testTag),
		ndjson(t, "Sandbox: cat(1) deny(1) file-read-data /a\n"+testTag),
		ndjson(t, "Sandbox: cat(2) deny(1) file-read-data /a\n"+testTag),
		"garbage",
		ndjson(t, "Sandbox: sh(3) deny(1) file-write-create /b\n"+testTag),
	}
	body := "cat <<'EOF'\n" + strings.Join(lines, "\n") + "\nEOF\nexec sleep 30"
	logPath, argsFile := fakeLog(t, body)
	c, err := StartCollector(logPath, testTag)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	col := c.Stop(50 * time.Millisecond)
	if time.Since(start) > 5*time.Second {
		t.Error("Stop did not end the stream")
	}
	if !col.Available || col.Reason != "" {
		t.Errorf("collection unavailable: %q", col.Reason)
	}
	want := []Denial{
		{Process: "cat", PID: 1, Operation: "file-read-data", Target: "/a"},
		{Process: "sh", PID: 3, Operation: "file-write-create", Target: "/b"},
	}
	if !slices.Equal(col.Denials, want) {
		t.Errorf("denials = %+v, want %+v (deduplicated by process, operation and target)", col.Denials, want)
	}
	args, _ := os.ReadFile(argsFile)
	if got := strings.Split(strings.TrimSpace(string(args)), "\n"); !slices.Equal(got, LogStreamArgs(testTag)) {
		t.Errorf("log called with %q", got)
	}
}

func TestCollectorUnavailable(t *testing.T) {
	logPath, _ := fakeLog(t, "echo \"log: Must be admin to run 'stream' command\" >&2\nexit 64")
	c, err := StartCollector(logPath, testTag)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	col := c.Stop(time.Second)
	if col.Available || !strings.Contains(col.Reason, "Must be admin") {
		t.Errorf("collection = %+v, want unavailable with log's message", col)
	}
}

func TestCollectorMissingTool(t *testing.T) {
	if _, err := StartCollector(filepath.Join(t.TempDir(), "no-log"), testTag); err == nil {
		t.Error("a missing log(1) must fail to start")
	}
}

func TestCollectorBoundsDenials(t *testing.T) {
	c := &Collector{seen: map[Denial]bool{}}
	for i := range maxDenials + 10 {
		c.add(Denial{Process: "x", Operation: "file-read-data", Target: "/f" + strings.Repeat("x", i)})
	}
	if len(c.denials) != maxDenials || !c.truncated {
		t.Errorf("kept %d denials, truncated %v", len(c.denials), c.truncated)
	}
}
