// Package sdbustest is a fake systemd manager for tests: it speaks
// peer-to-peer D-Bus on a unix socket (as systemd's private socket does)
// or plays a bus daemon in front of the manager (Hello, AddMatch), and
// implements Subscribe, StartTransientUnit, StopUnit,
// AttachProcessesToUnit, GetUnit, the Manager's ControlGroup property and
// a unit's ActiveState, emitting JobRemoved for the jobs it queues. Like
// systemd it handles one message at a time, from all its connections;
// Latency makes it slow and Faults makes it lose requests, answers and
// connections.
package sdbustest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/sdbus"
)

// Call is a method call the fake received.
type Call struct {
	Member string
	Unit   string                   // StartTransientUnit, StopUnit
	Mode   string                   // StartTransientUnit, StopUnit
	Props  map[string]sdbus.Variant // StartTransientUnit
	Sub    string                   // AttachProcessesToUnit
	PIDs   []uint32                 // AttachProcessesToUnit
}

// Manager is the fake. Set the fields before Serve; they are read under mu.
type Manager struct {
	// Bus makes the fake behave as a bus daemon: Hello must come first.
	Bus bool
	// ControlGroup is the value of the Manager's ControlGroup property.
	ControlGroup string
	// OnStart handles StartTransientUnit: it returns the result the job's
	// JobRemoved carries ("done", "failed"...), or an error reply.
	OnStart func(c Call) (result string, err *sdbus.Error)
	// OnStop handles StopUnit likewise. Nil: "done".
	OnStop func(c Call) (result string, err *sdbus.Error)
	// Hang makes StartTransientUnit never answer.
	Hang bool
	// OnAttach handles AttachProcessesToUnit. Nil: an error reply.
	OnAttach func(c Call) *sdbus.Error
	// Latency is how long each method call takes. Calls are handled one
	// at a time across all connections, as by systemd's event loop, so
	// concurrent callers queue.
	Latency time.Duration
	// Faults, when set, decides what becomes of each method call; n
	// counts the calls with that member so far, this one included.
	Faults func(c Call, n int) Fault
	// HoldFirst leaves the first message of every connection unread
	// until the next one arrives, as systemd's sd-bus server sometimes
	// does with the first message after BEGIN.
	HoldFirst bool

	mu     sync.Mutex
	calls  []Call
	counts map[string]int
	units  map[string]string // loaded units' ActiveState
	ln     net.Listener
	conns  []net.Conn
	dialed int
	open   int
	pings  int
	job    uint32
	wg     sync.WaitGroup
	// busy is held while a call is handled: one at a time.
	busy sync.Mutex
}

// Fault is what becomes of a method call.
type Fault int

const (
	// Answer handles the call as usual.
	Answer Fault = iota
	// Lose drops the call unseen: no effect, no answer.
	Lose
	// Mute handles the call but loses its answer (signals still go out).
	Mute
	// Hangup closes the connection instead of handling the call.
	Hangup
	// AnswerHangup handles and answers the call, then closes the
	// connection before the job's signals: JobRemoved is lost.
	AnswerHangup
)

// errHangup ends a connection on purpose.
var errHangup = errors.New("hung up")

// Dialed returns how many connections the fake has accepted.
func (m *Manager) Dialed() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dialed
}

// Pings returns how many org.freedesktop.DBus.Peer.Ping calls the fake
// answered; they are not in Calls.
func (m *Manager) Pings() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pings
}

// Open returns how many of the fake's connections are open.
func (m *Manager) Open() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.open
}

// Units returns the loaded units and their ActiveState.
func (m *Manager) Units() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]string{}
	for k, v := range m.units {
		out[k] = v
	}
	return out
}

// UnitPath is the object path systemd gives unit name: every byte but
// ASCII letters and digits escaped as _xx.
func UnitPath(name string) sdbus.ObjectPath {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		ch := name[i]
		if ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' {
			b.WriteByte(ch)
		} else {
			fmt.Fprintf(&b, "_%02x", ch)
		}
	}
	return sdbus.ObjectPath("/org/freedesktop/systemd1/unit/" + b.String())
}

// Calls returns the method calls received so far, but for the Peer
// interface's Ping (see Pings).
func (m *Manager) Calls() []Call {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Call(nil), m.calls...)
}

// ServeUserManager listens at $dir/systemd/private (or $dir/bus with Bus
// set), the paths a client with XDG_RUNTIME_DIR=dir tries, until the test
// ends.
func (m *Manager) ServeUserManager(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "systemd", "private")
	if m.Bus {
		path = filepath.Join(dir, "bus")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	m.ln = ln
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			m.mu.Lock()
			m.conns = append(m.conns, c)
			m.dialed++
			m.open++
			m.mu.Unlock()
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				defer func() {
					c.Close()
					m.mu.Lock()
					m.open--
					m.mu.Unlock()
				}()
				if err := m.serve(c); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, errHangup) {
					t.Logf("fake systemd: %v", err)
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		m.mu.Lock()
		for _, c := range m.conns {
			c.Close()
		}
		m.mu.Unlock()
		m.wg.Wait()
	})
	return path
}

type peer struct {
	c      net.Conn
	r      *bufio.Reader
	serial uint32
	// mute drops method returns and errors (Fault Mute).
	mute bool
	// helloed: a bus daemon's client said Hello.
	helloed bool
}

func (p *peer) send(msg *sdbus.Message) error {
	if p.mute && msg.Type != sdbus.TypeSignal {
		return nil
	}
	p.serial++
	msg.Serial = p.serial
	b, err := msg.Marshal()
	if err != nil {
		return err
	}
	_, err = p.c.Write(b)
	return err
}

func (p *peer) reply(to *sdbus.Message, sig sdbus.Signature, body ...any) error {
	return p.send(&sdbus.Message{Type: sdbus.TypeMethodReturn, ReplySerial: to.Serial, Signature: sig, Body: body})
}

func (p *peer) fail(to *sdbus.Message, e *sdbus.Error) error {
	return p.send(&sdbus.Message{Type: sdbus.TypeError, ReplySerial: to.Serial, ErrorName: e.Name, Signature: "s", Body: []any{e.Message}})
}

func (p *peer) signal(member string, sig sdbus.Signature, body ...any) error {
	return p.send(&sdbus.Message{
		Type: sdbus.TypeSignal, Flags: sdbus.FlagNoReplyExpected, Path: "/org/freedesktop/systemd1",
		Interface: "org.freedesktop.systemd1.Manager", Member: member, Signature: sig, Body: body,
	})
}

// auth is the server side of SASL EXTERNAL.
func (p *peer) auth() error {
	nul, err := p.r.ReadByte()
	if err != nil {
		return err
	}
	if nul != 0 {
		return fmt.Errorf("first byte %#x, want NUL", nul)
	}
	line, err := p.r.ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "AUTH EXTERNAL ") {
		_, _ = p.c.Write([]byte("REJECTED EXTERNAL\r\n"))
		return fmt.Errorf("unexpected %q", line)
	}
	if _, err := p.c.Write([]byte("OK 0123456789abcdef0123456789abcdef\r\n")); err != nil {
		return err
	}
	line, err = p.r.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "BEGIN\r\n" {
		return fmt.Errorf("unexpected %q, want BEGIN", line)
	}
	return nil
}

func (m *Manager) serve(c net.Conn) error {
	p := &peer{c: c, r: bufio.NewReader(c)}
	if err := p.auth(); err != nil {
		return err
	}
	var held *sdbus.Message
	for first := true; ; first = false {
		msg, err := sdbus.ReadMessage(p.r)
		if err != nil {
			return err
		}
		if first && m.HoldFirst {
			held = msg
			continue
		}
		if held != nil {
			if err := m.dispatch(p, held); err != nil {
				return err
			}
			held = nil
		}
		if err := m.dispatch(p, msg); err != nil {
			return err
		}
	}
}

// dispatch handles one message from p.
func (m *Manager) dispatch(p *peer, msg *sdbus.Message) error {
	if msg.Type != sdbus.TypeMethodCall {
		return nil
	}
	if m.Bus && !p.helloed && msg.Member != "Hello" {
		return fmt.Errorf("bus: %s before Hello", msg.Member)
	}
	if !m.Bus && msg.Member == "Hello" {
		return errors.New("a Hello on a peer-to-peer connection")
	}
	if msg.Interface == "org.freedesktop.DBus.Peer" && msg.Member == "Ping" {
		// Answered by sd-bus itself, not the manager's code; not a Call.
		m.mu.Lock()
		m.pings++
		m.mu.Unlock()
		m.busy.Lock()
		defer m.busy.Unlock()
		time.Sleep(m.Latency)
		return p.reply(msg, "")
	}
	call := Call{Member: msg.Member}
	switch msg.Member {
	case "StartTransientUnit", "StopUnit":
		call.Unit, _ = msg.Body[0].(string)
		call.Mode, _ = msg.Body[1].(string)
	}
	if msg.Member == "StartTransientUnit" && msg.Signature == "ssa(sv)a(sa(sv))" {
		call.Props = map[string]sdbus.Variant{}
		for _, it := range msg.Body[2].([]any) {
			st := it.(sdbus.Struct)
			call.Props[st[0].(string)] = st[1].(sdbus.Variant)
		}
	}
	if msg.Member == "GetUnit" && msg.Signature == "s" {
		call.Unit, _ = msg.Body[0].(string)
	}
	if msg.Member == "AttachProcessesToUnit" && msg.Signature == "ssau" {
		call.Unit, _ = msg.Body[0].(string)
		call.Sub, _ = msg.Body[1].(string)
		for _, p := range msg.Body[2].([]any) {
			call.PIDs = append(call.PIDs, p.(uint32))
		}
	}
	m.mu.Lock()
	m.calls = append(m.calls, call)
	if m.counts == nil {
		m.counts = map[string]int{}
	}
	m.counts[call.Member]++
	n := m.counts[call.Member]
	m.mu.Unlock()
	fault := Answer
	if m.Faults != nil {
		fault = m.Faults(call, n)
	}
	switch fault {
	case Lose:
		return nil
	case Hangup:
		return errHangup
	}
	p.mute = fault == Mute
	m.busy.Lock()
	time.Sleep(m.Latency)
	err := m.handle(p, msg, call, fault == AnswerHangup)
	m.busy.Unlock()
	p.mute = false
	if err == nil && fault == AnswerHangup {
		err = errHangup
	}
	return err
}

func (m *Manager) handle(p *peer, msg *sdbus.Message, call Call, hangup bool) error {
	switch msg.Member {
	case "Hello":
		p.helloed = true
		return p.reply(msg, "s", ":1.42")
	case "AddMatch":
		return p.reply(msg, "")
	case "Subscribe":
		return p.reply(msg, "")
	case "AttachProcessesToUnit":
		e := &sdbus.Error{Name: "org.freedesktop.DBus.Error.NotSupported", Message: "not implemented by this fake"}
		if m.OnAttach != nil {
			e = m.OnAttach(call)
		}
		if e != nil {
			return p.fail(msg, e)
		}
		return p.reply(msg, "")
	case "GetUnit":
		m.mu.Lock()
		_, ok := m.units[call.Unit]
		m.mu.Unlock()
		if !ok {
			return p.fail(msg, &sdbus.Error{Name: sdbus.ErrNoSuchUnit, Message: "Unit " + call.Unit + " not loaded."})
		}
		return p.reply(msg, "o", UnitPath(call.Unit))
	case "Get":
		if len(msg.Body) != 2 {
			break
		}
		if msg.Path == "/org/freedesktop/systemd1" && msg.Body[1] == "ControlGroup" {
			return p.reply(msg, "v", sdbus.Variant{Sig: "s", Value: m.ControlGroup})
		}
		if msg.Body[0] == "org.freedesktop.systemd1.Unit" && msg.Body[1] == "ActiveState" {
			m.mu.Lock()
			defer m.mu.Unlock()
			for name, state := range m.units {
				if UnitPath(name) == msg.Path {
					return p.reply(msg, "v", sdbus.Variant{Sig: "s", Value: state})
				}
			}
			return p.fail(msg, &sdbus.Error{Name: "org.freedesktop.DBus.Error.UnknownObject", Message: "no such object"})
		}
		return p.fail(msg, &sdbus.Error{Name: "org.freedesktop.DBus.Error.UnknownProperty", Message: "no such property"})
	case "StartTransientUnit", "StopUnit":
		if msg.Member == "StartTransientUnit" && m.Hang {
			return nil
		}
		h := m.OnStart
		if msg.Member == "StopUnit" {
			h = m.OnStop
		}
		result := "done"
		if h != nil {
			var e *sdbus.Error
			if result, e = h(call); e != nil {
				return p.fail(msg, e)
			}
		}
		m.mu.Lock()
		m.job++
		id := m.job
		if m.units == nil {
			m.units = map[string]string{}
		}
		switch {
		case msg.Member == "StopUnit" && result == "done":
			delete(m.units, call.Unit)
		case msg.Member == "StartTransientUnit" && result == "done":
			m.units[call.Unit] = "active"
		}
		m.mu.Unlock()
		job := sdbus.ObjectPath(fmt.Sprintf("/org/freedesktop/systemd1/job/%d", id))
		if err := p.reply(msg, "o", job); err != nil {
			return err
		}
		if hangup {
			return errHangup
		}
		// What a real manager interleaves: other units' signals and
		// another job's removal, before ours.
		if err := p.signal("UnitNew", "so", "other.service", sdbus.ObjectPath("/org/freedesktop/systemd1/unit/other_2eservice")); err != nil {
			return err
		}
		if err := p.signal("JobRemoved", "uoss", id+1000, sdbus.ObjectPath(fmt.Sprintf("/org/freedesktop/systemd1/job/%d", id+1000)), "other.service", "failed"); err != nil {
			return err
		}
		return p.signal("JobRemoved", "uoss", id, job, call.Unit, result)
	}
	return p.fail(msg, &sdbus.Error{Name: "org.freedesktop.DBus.Error.UnknownMethod", Message: "unknown method " + msg.Member})
}
