package session

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Protocol is the version of the session protocol (docs/session-protocol.md)
// that this package speaks; the server's hello names it.
const Protocol = 1

// Frame limits: a longer line, or a payload above MaxPayload, loses the
// framing, so the connection is closed after an error reply.
const (
	MaxLine    = 1 << 20
	MaxPayload = 1 << 20
)

// Request ops.
const (
	OpExec    = "exec"
	OpInput   = "input"
	OpSignal  = "signal"
	OpCancel  = "cancel"
	OpWait    = "wait"
	OpKill    = "kill"
	OpState   = "state"
	OpResolve = "resolve"
	OpEvents  = "events"
	OpDelete  = "delete"
	OpPing    = "ping"
	OpResize  = "resize"
)

// Reply types.
const (
	TypeHello   = "hello"
	TypeOK      = "ok"
	TypeError   = "error"
	TypeStarted = "started"
	TypeData    = "data"
	TypeExit    = "exit"
	TypeState   = "state"
	TypePath    = "path"
	TypeEvent   = "event"
)

// Error kinds, as the clients of every language map them.
const (
	KindPolicy      = "policy"      // the session's policy refuses it
	KindRuntime     = "runtime"     // it could not be done (no such cwd, ...)
	KindUnavailable = "unavailable" // the session is gone or ending
	KindNotFound    = "not_found"   // no such process
	KindProtocol    = "protocol"    // a malformed or unknown message
)

// Stdio modes of an exec's streams.
const (
	StdioNull   = "null"   // /dev/null
	StdioPipe   = "pipe"   // framed data messages on the connection
	StdioFD     = "fd"     // a descriptor passed with the request (SCM_RIGHTS)
	StdioStdout = "stdout" // stderr only: the same as stdout
)

// Request is one message from a client. Fields apply per op; unknown
// fields are protocol errors.
type Request struct {
	Op  string `json:"op"`
	Req uint64 `json:"req,omitempty"`

	// exec
	Args           []string `json:"args,omitempty"`
	Shell          string   `json:"shell,omitempty"`
	Cwd            string   `json:"cwd,omitempty"`
	Env            []string `json:"env,omitempty"`
	ReplaceEnv     bool     `json:"replace_env,omitempty"`
	Stdin          string   `json:"stdin,omitempty"`
	Stdout         string   `json:"stdout,omitempty"`
	Stderr         string   `json:"stderr,omitempty"`
	TimeoutMS      int64    `json:"timeout_ms,omitempty"`
	MaxOutputBytes int64    `json:"max_output_bytes,omitempty"`
	WaitDelayMS    *int64   `json:"wait_delay_ms,omitempty"`
	Detach         bool     `json:"detach,omitempty"`
	// TTY runs the process on a terminal of this size: stdin and stdout
	// are null or pipe, and stderr is null.
	TTY *Winsize `json:"tty,omitempty"`

	// resize
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`

	// input, signal, cancel, wait
	Proc string `json:"proc,omitempty"`
	// Len is the count of raw bytes that follow the line (input).
	Len int  `json:"len,omitempty"`
	EOF bool `json:"eof,omitempty"`
	// Signal is a name ("TERM", "SIGTERM") or a number, for signal and kill.
	Signal string `json:"signal,omitempty"`
	Group  bool   `json:"group,omitempty"`

	// resolve
	Path  string `json:"path,omitempty"`
	Write bool   `json:"write,omitempty"`

	// events
	On *bool `json:"on,omitempty"`
}

// Reply is one message from the server.
type Reply struct {
	Type string `json:"type"`
	Req  uint64 `json:"req,omitempty"`

	// hello
	Protocol int      `json:"protocol,omitempty"`
	ID       string   `json:"id,omitempty"`
	Features []string `json:"features,omitempty"`

	// error
	Kind    string `json:"kind,omitempty"`
	Message string `json:"message,omitempty"`

	// started, data, exit
	Proc   string `json:"proc,omitempty"`
	Pid    int    `json:"pid,omitempty"`
	Stream string `json:"stream,omitempty"`
	Len    int    `json:"len,omitempty"`
	*ExitInfo

	// state
	State *StateInfo `json:"state,omitempty"`

	// path
	HostPath string `json:"host_path,omitempty"`

	// event
	Event *Event `json:"event,omitempty"`
}

// ExitInfo is how an exec ended.
type ExitInfo struct {
	// Code is the exit status, 128+Signal when a signal ended it, or 124
	// when its timeout did.
	Code            int     `json:"code"`
	Signal          int     `json:"signal,omitempty"`
	TimedOut        bool    `json:"timed_out,omitempty"`
	Aborted         bool    `json:"aborted,omitempty"`
	StdoutTruncated bool    `json:"stdout_truncated,omitempty"`
	StderrTruncated bool    `json:"stderr_truncated,omitempty"`
	DurationMS      float64 `json:"duration_ms"`
	// Error is set when the session ended before the process did.
	Error string `json:"error,omitempty"`
}

// StateInfo describes a session.
type StateInfo struct {
	ID          string     `json:"id"`
	Status      string     `json:"status"`
	Pid         int        `json:"pid"`
	Workspace   string     `json:"workspace,omitempty"`
	Cwd         string     `json:"cwd"`
	Persistent  bool       `json:"persistent"`
	IdleTimeout float64    `json:"idle_timeout_s,omitempty"`
	Limits      string     `json:"limits,omitempty"`
	Processes   []ProcInfo `json:"processes"`
}

// ProcInfo is one process started through the session that has not been
// waited for.
type ProcInfo struct {
	Proc    string   `json:"proc"`
	Pid     int      `json:"pid"`
	Args    []string `json:"args"`
	Running bool     `json:"running"`
	Detach  bool     `json:"detach,omitempty"`
}

// Event is something the session reports to subscribers: a denied call
// (Kind "violation"), the end of a process ("exit"), or the session's end
// ("state").
type Event struct {
	Kind string `json:"kind"`
	// violation
	Action     string `json:"action,omitempty"` // the system call
	Target     string `json:"target,omitempty"` // the argument that decided, if any
	Suggestion string `json:"suggested_capability,omitempty"`
	Count      int    `json:"count,omitempty"`
	// exit
	Proc string    `json:"proc,omitempty"`
	Exit *ExitInfo `json:"exit,omitempty"`
	// state
	Status string `json:"status,omitempty"`
}

// Winsize is a terminal's size.
type Winsize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// Error is an error reply, as an error value.
type Error struct {
	Kind    string
	Message string
}

func (e *Error) Error() string { return e.Message }

// ErrFraming is a message that cannot be read past: the stream's framing
// is lost.
var ErrFraming = errors.New("session: framing lost")

// readLine reads one message line of at most MaxLine bytes.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		// The newline does not count.
		if n := len(line); n > MaxLine && (err != nil || n-1 > MaxLine) {
			return nil, fmt.Errorf("%w: a line longer than %d bytes", ErrFraming, MaxLine)
		}
		if err == nil {
			return line[:len(line)-1], nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if err == io.EOF && len(line) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// readPayload reads the n raw bytes that follow a line.
func readPayload(r *bufio.Reader, n int) ([]byte, error) {
	if n < 0 || n > MaxPayload {
		return nil, fmt.Errorf("%w: a payload of %d bytes (at most %d)", ErrFraming, n, MaxPayload)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// decodeStrict decodes one JSON object with no unknown fields.
func decodeStrict(line []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// ParseSignal reads a signal given as a name, with or without "SIG", or a
// number.
func ParseSignal(s string) (int, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > 64 {
			return 0, fmt.Errorf("signal %d out of range", n)
		}
		return n, nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if n := unix.SignalNum(name); n != 0 {
		return int(n), nil
	}
	return 0, fmt.Errorf("unknown signal %q", s)
}
