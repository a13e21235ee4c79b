package darwin

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Violation collection.
//
// Every rule of the profile that denies carries (with message TAG), the
// run's unique tag, so the kernel's denial reports for this run are the log
// events whose message contains the tag. The collector streams them with
// `log stream --style ndjson --predicate 'eventMessage CONTAINS "TAG"'`
// for the duration of the run and a short drain after it, since reports
// reach the log asynchronously. It is best effort: events logged before
// the stream attaches are missed, and log(1) refuses to stream for users
// who are not administrators, in which case Collection says so.

// LogPath is the unified logging tool.
const LogPath = "/usr/bin/log"

// maxDenials bounds what one run can make the collector keep.
const maxDenials = 256

// LogPredicate selects the events of one run.
func LogPredicate(tag string) string {
	return `eventMessage CONTAINS "` + tag + `"`
}

// LogStreamArgs is log(1)'s argv (without the program) for one run.
func LogStreamArgs(tag string) []string {
	return []string{"stream", "--style", "ndjson", "--predicate", LogPredicate(tag)}
}

// Denial is one Seatbelt denial report.
type Denial struct {
	Process   string
	PID       int
	Operation string
	// Target is the path, service or address, when the report names one.
	Target string
}

// denyLine matches "Sandbox: cat(123) deny(1) file-read-data /path".
var denyLine = regexp.MustCompile(`Sandbox: (.+)\((\d+)\) deny\(\d+\) (\S+)(?: (.*))?$`)

// ParseLogLine reads one ndjson event and returns the denial it reports,
// if it is one of this run's.
func ParseLogLine(line []byte, tag string) (Denial, bool) {
	var ev struct {
		EventMessage string `json:"eventMessage"`
	}
	if json.Unmarshal(line, &ev) != nil || !strings.Contains(ev.EventMessage, tag) {
		return Denial{}, false
	}
	for _, l := range strings.Split(ev.EventMessage, "\n") {
		m := denyLine.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[2])
		return Denial{Process: m[1], PID: pid, Operation: m[3], Target: strings.TrimSpace(m[4])}, true
	}
	return Denial{}, false
}

// Violation is the backend-neutral form of a denial; the root package
// copies it into agentrun.Violation.
type Violation struct {
	Kind       string
	Name       string
	Detail     string
	Suggestion string
}

// Violation describes the denial for the result JSON.
func (d Denial) Violation() Violation {
	v := Violation{Kind: denialKind(d.Operation), Name: d.Target, Detail: fmt.Sprintf("%s by %s(%d)", d.Operation, d.Process, d.PID)}
	if v.Name == "" {
		v.Name = d.Operation
	}
	switch v.Kind {
	case "file-read":
		v.Suggestion = "grant read access with --ro " + d.Target
	case "file-write":
		v.Suggestion = "grant write access with --rw " + d.Target
	case "network":
		v.Suggestion = "the network is off; use --net host if the command needs it"
	}
	return v
}

func denialKind(op string) string {
	for _, k := range []struct{ prefix, kind string }{
		{"file-read", "file-read"}, {"file-write", "file-write"}, {"file-", "file"},
		{"network", "network"}, {"system-socket", "network"}, {"mach-", "ipc"}, {"ipc-", "ipc"},
		{"signal", "process"}, {"process-", "process"}, {"sysctl", "sysctl"},
	} {
		if strings.HasPrefix(op, k.prefix) {
			return k.kind
		}
	}
	return "seatbelt"
}

// Collection is what a collector saw.
type Collection struct {
	Denials []Denial
	// Available is false when denials could not be observed for the whole
	// run; Reason then says why and Denials holds whatever arrived.
	Available bool
	Reason    string
	// Truncated is set when more than maxDenials distinct denials arrived.
	Truncated bool
}

// Collector streams one run's denials from the unified log.
type Collector struct {
	tag      string
	cmd      *exec.Cmd
	stderr   limitedBuffer
	exited   chan struct{}
	readDone chan struct{}
	waitErr  error

	mu        sync.Mutex
	denials   []Denial
	seen      map[Denial]bool
	truncated bool
}

// StartCollector starts streaming; logPath is normally LogPath.
func StartCollector(logPath, tag string) (*Collector, error) {
	c := &Collector{tag: tag, exited: make(chan struct{}), readDone: make(chan struct{}), seen: map[Denial]bool{}}
	c.cmd = exec.Command(logPath, LogStreamArgs(tag)...)
	c.cmd.Stderr = &c.stderr
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("darwin: log stream: %w", err)
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("darwin: log stream: %w", err)
	}
	go c.read(out)
	go func() {
		<-c.readDone
		c.waitErr = c.cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

func (c *Collector) read(r io.Reader) {
	defer close(c.readDone)
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if d, ok := ParseLogLine(bytes.TrimSpace(line), c.tag); ok {
			c.add(d)
		}
		if err != nil {
			return
		}
	}
}

func (c *Collector) add(d Denial) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := Denial{Operation: d.Operation, Target: d.Target, Process: d.Process}
	if c.seen[key] {
		return
	}
	if len(c.denials) >= maxDenials {
		c.truncated = true
		return
	}
	c.seen[key] = true
	c.denials = append(c.denials, d)
}

// Stop waits drain for late reports, ends the stream and returns what it
// saw. A stream that ended on its own before Stop makes the collection
// unavailable, with log(1)'s message as the reason.
func (c *Collector) Stop(drain time.Duration) Collection {
	early := false
	select {
	case <-c.exited:
		early = true
	case <-time.After(drain):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	col := Collection{Denials: c.denials, Available: !early, Truncated: c.truncated}
	if early {
		col.Reason = c.earlyReason()
	}
	return col
}

func (c *Collector) earlyReason() string {
	msg := strings.TrimSpace(c.stderr.String())
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	switch {
	case msg != "":
		return "log stream: " + msg
	case c.waitErr != nil:
		return "log stream: " + c.waitErr.Error()
	}
	return "log stream ended before the run did"
}

// limitedBuffer keeps the first 4 KiB written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := 4096 - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
