package sdbus

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// Conn is one authenticated D-Bus connection, either peer-to-peer (a
// service's private socket) or to a bus daemon (after Hello). It is not
// safe for concurrent use: one goroutine calls at a time.
type Conn struct {
	c      net.Conn
	r      *bufio.Reader
	serial uint32
	// bus is set when the peer is a bus daemon; unique is the name Hello
	// gave us.
	bus    bool
	unique string
	// watch selects the signals kept while waiting for a reply, so that
	// WaitSignal sees those that arrived first. At most maxQueued.
	watch  func(*Message) bool
	queued []*Message
}

const maxQueued = 1024

// maxAuthLine bounds a SASL line from the peer.
const maxAuthLine = 512

// Dial connects to the unix socket at path and authenticates with SASL
// EXTERNAL as uid. With bus set it then says Hello, as a bus daemon
// expects; a peer-to-peer server (systemd's private socket) must not get
// one. Every step is bounded by ctx.
func Dial(ctx context.Context, path string, uid int, bus bool) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("sdbus: %w", err)
	}
	c := &Conn{c: nc, r: bufio.NewReader(nc), bus: bus}
	if err := c.auth(ctx, uid); err != nil {
		nc.Close()
		return nil, err
	}
	if bus {
		reply, err := c.Call(ctx, &Message{
			Type: TypeMethodCall, Destination: "org.freedesktop.DBus", Path: "/org/freedesktop/DBus",
			Interface: "org.freedesktop.DBus", Member: "Hello",
		})
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("sdbus: Hello: %w", err)
		}
		if len(reply.Body) != 1 {
			nc.Close()
			return nil, fmt.Errorf("sdbus: Hello: unexpected reply signature %q", reply.Signature)
		}
		c.unique, _ = reply.Body[0].(string)
	}
	return c, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// UniqueName is the name the bus daemon assigned ("" peer-to-peer).
func (c *Conn) UniqueName() string { return c.unique }

// Bus reports whether the peer is a bus daemon.
func (c *Conn) Bus() bool { return c.bus }

// deadline applies ctx to the socket until the returned stop is called:
// its deadline directly, and its cancellation by moving the deadline into
// the past so a blocked read returns.
func (c *Conn) deadline(ctx context.Context) (stop func()) {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Time{}
	}
	_ = c.c.SetDeadline(dl)
	cancel := context.AfterFunc(ctx, func() { _ = c.c.SetDeadline(time.Unix(1, 0)) })
	return func() { cancel() }
}

// ctxErr prefers ctx's error over the socket timeout it caused.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("sdbus: %w", cerr)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("sdbus: %w", context.DeadlineExceeded)
	}
	return fmt.Errorf("sdbus: %w", err)
}

// auth runs the client side of SASL EXTERNAL: a NUL byte, AUTH with the
// uid in hex-encoded decimal, OK, BEGIN.
func (c *Conn) auth(ctx context.Context, uid int) error {
	defer c.deadline(ctx)()
	id := hex.EncodeToString([]byte(strconv.Itoa(uid)))
	if _, err := c.c.Write([]byte("\x00AUTH EXTERNAL " + id + "\r\n")); err != nil {
		return ctxErr(ctx, err)
	}
	line, err := c.authLine()
	if err != nil {
		return ctxErr(ctx, err)
	}
	switch {
	case strings.HasPrefix(line, "OK "):
	case strings.HasPrefix(line, "REJECTED"):
		return fmt.Errorf("sdbus: authentication as uid %d rejected (server offers: %s)", uid, strings.TrimSpace(strings.TrimPrefix(line, "REJECTED")))
	default:
		return fmt.Errorf("sdbus: unexpected authentication reply %q", line)
	}
	if _, err := c.c.Write([]byte("BEGIN\r\n")); err != nil {
		return ctxErr(ctx, err)
	}
	if err := awaitDrained(ctx, c.c); err != nil {
		return ctxErr(ctx, err)
	}
	return nil
}

func (c *Conn) authLine() (string, error) {
	var b []byte
	for len(b) < maxAuthLine {
		ch, err := c.r.ReadByte()
		if err != nil {
			return "", err
		}
		if ch == '\n' {
			if len(b) == 0 || b[len(b)-1] != '\r' {
				return "", errors.New("authentication line not ended by CRLF")
			}
			return string(b[:len(b)-1]), nil
		}
		b = append(b, ch)
	}
	return "", errors.New("authentication line too long")
}

// Send writes m with the next serial, which it returns.
func (c *Conn) Send(ctx context.Context, m *Message) (uint32, error) {
	c.serial++
	if c.serial == 0 {
		c.serial = 1
	}
	m.Serial = c.serial
	b, err := m.Marshal()
	if err != nil {
		return 0, err
	}
	defer c.deadline(ctx)()
	if _, err := c.c.Write(b); err != nil {
		return 0, ctxErr(ctx, err)
	}
	return m.Serial, nil
}

// Receive reads the next message.
func (c *Conn) Receive(ctx context.Context) (*Message, error) {
	defer c.deadline(ctx)()
	m, err := ReadMessage(c.r)
	if err != nil {
		if errors.Is(err, ErrMalformed) {
			return nil, err
		}
		return nil, ctxErr(ctx, err)
	}
	return m, nil
}

// Watch sets which signals are kept while a Call waits for its reply.
func (c *Conn) Watch(keep func(*Message) bool) { c.watch = keep }

// Call sends a method call and returns its reply. An error reply comes
// back as an *Error. Signals that arrive meanwhile and match Watch are
// kept for WaitSignal; other messages are dropped.
func (c *Conn) Call(ctx context.Context, m *Message) (*Message, error) {
	m.Type = TypeMethodCall
	serial, err := c.Send(ctx, m)
	if err != nil {
		return nil, err
	}
	for {
		r, err := c.Receive(ctx)
		if err != nil {
			return nil, err
		}
		switch {
		case (r.Type == TypeMethodReturn || r.Type == TypeError) && r.ReplySerial == serial:
			if r.Type == TypeError {
				return nil, r.AsError()
			}
			return r, nil
		case r.Type == TypeSignal && c.watch != nil && c.watch(r):
			if len(c.queued) == maxQueued {
				c.queued = c.queued[1:]
			}
			c.queued = append(c.queued, r)
		}
	}
}

// WaitSignal returns the first signal for which match is true, from those
// kept during earlier calls or newly received.
func (c *Conn) WaitSignal(ctx context.Context, match func(*Message) bool) (*Message, error) {
	for i, s := range c.queued {
		if match(s) {
			c.queued = append(c.queued[:i], c.queued[i+1:]...)
			return s, nil
		}
	}
	for {
		r, err := c.Receive(ctx)
		if err != nil {
			return nil, err
		}
		if r.Type == TypeSignal && match(r) {
			return r, nil
		}
	}
}
