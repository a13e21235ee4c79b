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
	"sync"
	"time"
)

// Conn is one authenticated D-Bus connection, either peer-to-peer (a
// service's private socket) or to a bus daemon (after Hello). It is safe
// for concurrent use: one goroutine reads every message, hands each reply
// to the call with its serial number and each signal to the handler set
// with OnSignal, so callers never wait behind another caller's reply.
type Conn struct {
	c net.Conn
	// bus is set when the peer is a bus daemon; unique is the name Hello
	// gave us.
	bus    bool
	unique string

	// wmu makes a message's serial and its write one step, so the peer
	// sees serials in order and messages never interleave.
	wmu    sync.Mutex
	serial uint32
	// writing is the serial being written, under dmu, so that a
	// cancelled caller's late deadline change cannot hit the next writer.
	dmu     sync.Mutex
	writing uint32

	mu       sync.Mutex
	pending  map[uint32]chan *Message
	onSignal func(*Message)
	err      error         // why the connection ended; set before done closes
	done     chan struct{} // closed once the connection is unusable
}

// ErrClosed is wrapped by the errors of calls on a connection that was
// closed, by Close or because the peer hung up or sent garbage.
var ErrClosed = errors.New("sdbus: connection closed")

// maxAuthLine bounds a SASL line from the peer.
const maxAuthLine = 512

// Dial connects to the unix socket at path and authenticates with SASL
// EXTERNAL as uid. With bus set it then says Hello, as a bus daemon
// expects; a peer-to-peer server (systemd's private socket) must not get
// one, and is pinged until it answers instead (see ping). Every step is
// bounded by ctx.
func Dial(ctx context.Context, path string, uid int, bus bool) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("sdbus: %w", err)
	}
	c := &Conn{c: nc, bus: bus, pending: map[uint32]chan *Message{}, done: make(chan struct{})}
	r := bufio.NewReader(nc)
	if err := c.auth(ctx, r, uid); err != nil {
		nc.Close()
		return nil, err
	}
	go c.read(r)
	if !bus {
		if err := c.ping(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	if bus {
		reply, err := c.Call(ctx, &Message{
			Type: TypeMethodCall, Destination: "org.freedesktop.DBus", Path: "/org/freedesktop/DBus",
			Interface: "org.freedesktop.DBus", Member: "Hello",
		})
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("sdbus: Hello: %w", err)
		}
		if len(reply.Body) != 1 {
			c.Close()
			return nil, fmt.Errorf("sdbus: Hello: unexpected reply signature %q", reply.Signature)
		}
		c.unique, _ = reply.Body[0].(string)
	}
	return c, nil
}

// ping returns once the peer answers a Ping on the new connection.
// systemd's sd-bus server (seen with 252 under load, in spite of
// awaitDrained) sometimes leaves the first message after BEGIN unanswered
// until more data arrives: the connection's first real request then waited
// out its whole time limit. Pings sent with growing pauses are that data,
// and an answer to any of them shows that the connection works.
func (c *Conn) ping(ctx context.Context) error {
	const most = 16
	replies := make(chan *Message, most)
	var serials []uint32
	defer func() {
		for _, s := range serials {
			c.forget(s)
		}
	}()
	pause := 100 * time.Millisecond
	for {
		if len(serials) < most {
			s, err := c.send(ctx, &Message{
				Type: TypeMethodCall, Path: "/", Interface: "org.freedesktop.DBus.Peer", Member: "Ping",
			}, replies)
			if err != nil {
				return fmt.Errorf("sdbus: Ping: %w", err)
			}
			serials = append(serials, s)
		}
		select {
		case <-replies: // an error reply is an answer too
			return nil
		case <-c.done:
			return fmt.Errorf("sdbus: Ping: %w", c.Err())
		case <-ctx.Done():
			return fmt.Errorf("sdbus: Ping: %w", ctx.Err())
		case <-time.After(pause):
			pause = min(2*pause, 2*time.Second)
		}
	}
}

// Close closes the connection; calls waiting on it return ErrClosed.
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	return nil
}

// Done is closed once the connection can no longer be used; Err then
// says why.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is nil while the connection is usable, then why it is not (it
// wraps ErrClosed).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fail ends the connection with cause, once.
func (c *Conn) fail(cause error) {
	c.mu.Lock()
	if c.err == nil {
		if errors.Is(cause, ErrClosed) {
			c.err = cause
		} else {
			c.err = fmt.Errorf("%w: %w", ErrClosed, cause)
		}
		close(c.done)
	}
	c.mu.Unlock()
	c.c.Close()
}

// UniqueName is the name the bus daemon assigned ("" peer-to-peer).
func (c *Conn) UniqueName() string { return c.unique }

// Bus reports whether the peer is a bus daemon.
func (c *Conn) Bus() bool { return c.bus }

// OnSignal sets the function that receives every signal. It runs on the
// goroutine that reads the connection, so it must not block.
func (c *Conn) OnSignal(f func(*Message)) {
	c.mu.Lock()
	c.onSignal = f
	c.mu.Unlock()
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
// uid in hex-encoded decimal, OK, BEGIN. It runs before the reading
// goroutine exists, so it may use r and the socket's deadline itself.
func (c *Conn) auth(ctx context.Context, r *bufio.Reader, uid int) error {
	dl, _ := ctx.Deadline()
	_ = c.c.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = c.c.SetDeadline(time.Unix(1, 0)) })
	if err := c.sasl(ctx, r, uid); err != nil {
		stop()
		return err
	}
	if !stop() {
		// ctx ended meanwhile and may have moved the deadline.
		return fmt.Errorf("sdbus: %w", ctx.Err())
	}
	return c.c.SetDeadline(time.Time{})
}

func (c *Conn) sasl(ctx context.Context, r *bufio.Reader, uid int) error {
	id := hex.EncodeToString([]byte(strconv.Itoa(uid)))
	if _, err := c.c.Write([]byte("\x00AUTH EXTERNAL " + id + "\r\n")); err != nil {
		return ctxErr(ctx, err)
	}
	line, err := authLine(r)
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

func authLine(r *bufio.Reader) (string, error) {
	var b []byte
	for len(b) < maxAuthLine {
		ch, err := r.ReadByte()
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

// read delivers every message until the connection ends. Replies nobody
// waits for any more (their caller gave up) and calls to us are dropped.
func (c *Conn) read(r *bufio.Reader) {
	for {
		m, err := ReadMessage(r)
		if err != nil {
			c.fail(err)
			return
		}
		switch m.Type {
		case TypeMethodReturn, TypeError:
			c.mu.Lock()
			ch := c.pending[m.ReplySerial]
			delete(c.pending, m.ReplySerial)
			c.mu.Unlock()
			if ch != nil {
				ch <- m // buffered: never blocks
			}
		case TypeSignal:
			c.mu.Lock()
			f := c.onSignal
			c.mu.Unlock()
			if f != nil {
				f(m)
			}
		}
	}
}

// send writes m with the next serial, which it returns, and has the
// reply to m delivered to reply. A write that fails or times out ends
// the connection: part of a message may have gone out.
func (c *Conn) send(ctx context.Context, m *Message, reply chan *Message) (uint32, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("sdbus: %w", err)
	}
	c.serial++
	if c.serial == 0 {
		c.serial = 1
	}
	m.Serial = c.serial
	b, err := m.Marshal()
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return 0, c.err
	}
	c.pending[m.Serial] = reply
	c.mu.Unlock()

	c.dmu.Lock()
	c.writing = m.Serial
	dl, _ := ctx.Deadline()
	_ = c.c.SetWriteDeadline(dl)
	c.dmu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		c.dmu.Lock()
		if c.writing == m.Serial {
			_ = c.c.SetWriteDeadline(time.Unix(1, 0))
		}
		c.dmu.Unlock()
	})
	_, err = c.c.Write(b)
	stop()
	c.dmu.Lock()
	c.writing = 0
	c.dmu.Unlock()
	if err != nil {
		c.forget(m.Serial)
		c.fail(err)
		return 0, ctxErr(ctx, err)
	}
	return m.Serial, nil
}

func (c *Conn) forget(serial uint32) {
	c.mu.Lock()
	delete(c.pending, serial)
	c.mu.Unlock()
}

// Call sends a method call and returns its reply. An error reply comes
// back as an *Error; a connection that ends first as an error wrapping
// ErrClosed; ctx ending first as ctx's error, and a reply that arrives
// after that is dropped.
func (c *Conn) Call(ctx context.Context, m *Message) (*Message, error) {
	m.Type = TypeMethodCall
	ch := make(chan *Message, 1)
	serial, err := c.send(ctx, m, ch)
	if err != nil {
		return nil, err
	}
	var r *Message
	select {
	case r = <-ch:
	case <-c.done:
		select {
		case r = <-ch:
		default:
			return nil, c.Err()
		}
	case <-ctx.Done():
		c.forget(serial)
		select {
		case r = <-ch:
		default:
			return nil, fmt.Errorf("sdbus: %w", ctx.Err())
		}
	}
	if r.Type == TypeError {
		return nil, r.AsError()
	}
	return r, nil
}
