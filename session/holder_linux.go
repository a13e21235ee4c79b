//go:build linux

package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// HolderConfig is what a holder process reads on its stdin.
type HolderConfig struct {
	ID       string      `json:"id"`
	StateDir string      `json:"state_dir,omitempty"`
	Spec     *specs.Spec `json:"spec"`
	// IdleTimeoutMS deletes the session once no client has been connected
	// and nothing has been asked of it for this long; 0 never.
	IdleTimeoutMS int64 `json:"idle_timeout_ms,omitempty"`
}

// Ack is the byte that acknowledges the ready line; ackTimeout is how
// long the holder waits for it.
const (
	Ack        = 'k'
	ackTimeout = 10 * time.Second
)

// Ready is the holder's one line on its ready descriptor: the session
// runs (Socket, Pid), or Error says why it could not be made.
type Ready struct {
	OK     bool   `json:"ok"`
	ID     string `json:"id,omitempty"`
	Socket string `json:"socket,omitempty"`
	Pid    int    `json:"pid,omitempty"`
	Holder int    `json:"holder,omitempty"`
	Error  string `json:"error,omitempty"`
}

// RunHolder is the life of a process that holds a persistent session: it
// reads a HolderConfig from in, opens the session, says so on ready and
// serves it until it is deleted, idles out, its init dies or the holder
// gets SIGTERM or SIGINT. ready is a stream socket: once the session
// runs, the holder writes the line and waits for one byte back (Ack). If
// the line cannot be written or no byte comes (whoever asked for the
// session is gone, killed during its create), the session is deleted at
// once: a session nobody was told of is not left behind. It returns the
// process's exit status.
func RunHolder(in io.Reader, ready *os.File, warn func(string), usernsBlocker func(error) string) int {
	// Signals are taken over first: a TERM during the build ends it
	// cleanly instead of killing the holder with its init half made.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	signal.Ignore(syscall.SIGPIPE)
	say := func(r Ready) bool {
		b, _ := json.Marshal(r)
		_, err := ready.Write(append(b, '\n'))
		if err == nil && r.OK {
			var ack [1]byte
			_ = ready.SetReadDeadline(time.Now().Add(ackTimeout))
			if n, rerr := ready.Read(ack[:]); n != 1 || rerr != nil || ack[0] != Ack {
				err = fmt.Errorf("no acknowledgement: %v", rerr)
			}
		}
		ready.Close()
		return err == nil
	}
	var cfg HolderConfig
	dec := json.NewDecoder(in)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		say(Ready{Error: fmt.Sprintf("session holder: config: %v", err)})
		return 2
	}
	// A TERM or INT during the build cancels it; one that comes as the
	// build ends is not lost (the session is then deleted at once); a
	// HUP is ignored throughout, as in hold.
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	var early os.Signal
	go func() {
		defer close(stopped)
		for {
			select {
			case s := <-sigs:
				if s == syscall.SIGHUP {
					continue
				}
				early = s
				cancel()
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	h, err := Open(ctx, Config{
		ID: cfg.ID, StateDir: cfg.StateDir, Spec: cfg.Spec, Listen: true,
		Persistent: true, IdleTimeout: time.Duration(cfg.IdleTimeoutMS) * time.Millisecond,
		Warn: warn, UsernsBlocker: usernsBlocker,
	})
	cancel()
	<-stopped
	if err == nil && early != nil {
		_ = h.Close()
		err = fmt.Errorf("ended by %v while it was made", early)
	}
	if err != nil {
		say(Ready{Error: err.Error()})
		return 125
	}
	if !say(Ready{OK: true, ID: cfg.ID, Socket: h.Socket(), Pid: h.sb.Pid(), Holder: os.Getpid()}) {
		_ = h.Close()
		return 1
	}
	// The build's garbage goes back to the kernel now, not minutes later
	// through the scavenger: an idle session is mostly this process.
	debug.FreeOSMemory()
	code := h.hold(sigs)
	// A delete ends the session before its reply goes out.
	if h.ln != nil {
		h.ln.awaitReplies(2 * time.Second)
	}
	return code
}

// hold serves the session until it ends.
func (h *Host) hold(sigs <-chan os.Signal) int {
	idle := h.cfg.IdleTimeout
	var tick <-chan time.Time
	if idle > 0 {
		t := time.NewTicker(min(idle/4+time.Millisecond, 30*time.Second))
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-h.Done():
			_ = h.Close()
			return 0
		case s := <-sigs:
			if s == syscall.SIGHUP {
				continue
			}
			return closeStatus(h.Close())
		case <-tick:
			if since := h.idleSince(); !since.IsZero() && time.Since(since) >= idle {
				return closeStatus(h.Close())
			}
		}
	}
}

func closeStatus(err error) int {
	if err != nil && !errors.Is(err, ErrClosed) {
		fmt.Fprintf(os.Stderr, "agentrun: session: %v\n", err)
		return 1
	}
	return 0
}
