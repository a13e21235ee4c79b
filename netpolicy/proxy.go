package netpolicy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Protocols named in a Refusal.
const (
	ProtoHTTP    = "http"    // an absolute-form HTTP request, or one that is not a proxy request
	ProtoConnect = "connect" // an HTTP CONNECT tunnel
	ProtoSOCKS5  = "socks5"
	ProtoTunnel  = "tunnel" // Proxy.Tunnel
	ProtoUnknown = "unknown"
)

// Default timeouts of a Proxy.
const (
	DefaultHandshakeTimeout = 30 * time.Second
	DefaultDialTimeout      = 30 * time.Second
)

// maxHeaderBytes bounds an HTTP request head, so that a client cannot
// make the proxy buffer without end.
const maxHeaderBytes = 1 << 20

// ErrProxyClosed is returned by Serve and Tunnel once Close was called.
var ErrProxyClosed = errors.New("netpolicy: proxy closed")

// Refusal describes a connection the proxy refused. It maps onto an
// agentrun violation {kind: "network", name: Name(), detail: Reason,
// suggestion: Suggestion}.
type Refusal struct {
	// Protocol is one of the Proto constants.
	Protocol string
	// Host is the canonical destination host, or the host as sent
	// (quoted when it holds bytes that cannot be shown) when it is not
	// valid; empty when the request was too malformed to name one.
	Host string
	// Port is the destination port, 0 when unknown.
	Port int
	// Reason says in one line why.
	Reason string
	// Suggestion is the flag that would allow it, when one would.
	Suggestion string
	// Client is the client's address.
	Client string
}

// Name returns the destination as HOST:PORT, or what is known of it.
func (r Refusal) Name() string {
	if r.Host == "" || r.Port == 0 {
		return r.Host
	}
	return hostPort(r.Host, r.Port)
}

// Proxy is an HTTP forward proxy (absolute-form requests and CONNECT) and
// a SOCKS5 server on the same listeners, told apart by the first byte a
// client sends, that connects only where Policy allows.
//
// It resolves names itself, checks every address (Policy.Check) and
// connects to exactly the address it checked: the client's idea of the
// address, an HTTP Host header and anything inside a tunnel (TLS SNI
// included) play no part. Set the fields before the first Serve and do
// not change them after.
type Proxy struct {
	// Policy decides; nil refuses everything.
	Policy *Policy
	// Resolver resolves allowed names; nil means NetResolver(nil).
	Resolver Resolver
	// Dial connects to an IP:port the policy allowed; nil means a
	// net.Dialer. It is never given a name.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// OnRefuse, when set, is called for every refused connection, from
	// the connection's goroutine: it must be safe for concurrent use and
	// should not block.
	OnRefuse func(Refusal)
	// HandshakeTimeout bounds the time from accepting a connection to
	// the end of its request (and, with keep-alive, the wait for the next
	// request): a client that sends nothing, or too little, is dropped.
	// Zero means DefaultHandshakeTimeout. Established tunnels have no
	// idle limit: ssh sessions, long polls and websockets are quiet for
	// long stretches.
	HandshakeTimeout time.Duration
	// DialTimeout bounds lookup and connect together; zero means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// Logger, when set, gets a debug line for failures that are not
	// refusals (lookup and connect errors, broken clients).
	Logger *slog.Logger

	mu        sync.Mutex
	ctx       context.Context // cancelled by Close
	cancel    context.CancelFunc
	closed    bool
	listeners map[net.Listener]struct{}
	outbound  map[string]int // local addresses of our upstream connections
	wg        sync.WaitGroup
}

// init sets up the internal state once; p.mu must be held.
func (p *Proxy) init() {
	if p.ctx == nil {
		p.ctx, p.cancel = context.WithCancel(context.Background())
		p.listeners = map[net.Listener]struct{}{}
		p.outbound = map[string]int{}
	}
}

// Serve accepts connections on l and serves each in its own goroutine
// until Close is called (it then returns ErrProxyClosed) or l fails. A
// Proxy may serve several listeners at once. Serve closes l on return.
func (p *Proxy) Serve(l net.Listener) error {
	return p.ServeContext(context.Background(), l)
}

// ServeContext is Serve that also stops, returning ctx.Err(), when ctx
// is done; it then closes l and every connection accepted on it.
func (p *Proxy) ServeContext(ctx context.Context, l net.Listener) error {
	p.mu.Lock()
	p.init()
	if p.closed {
		p.mu.Unlock()
		l.Close()
		return ErrProxyClosed
	}
	p.listeners[l] = struct{}{}
	base := p.ctx
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.listeners, l)
		p.mu.Unlock()
		l.Close()
	}()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopBase := context.AfterFunc(base, cancel)
	defer stopBase()
	stopL := context.AfterFunc(ctx, func() { l.Close() })
	defer stopL()

	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if base.Err() != nil {
				return ErrProxyClosed
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("netpolicy: accept: %w", err)
			}
			// Out of file descriptors and the like: back off as
			// net/http does rather than spin or give up.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			p.logf("accept failed, retrying", "err", err, "delay", delay)
			select {
			case <-time.After(delay):
			case <-ctx.Done():
			}
			continue
		}
		delay = 0
		if !p.track() {
			c.Close()
			return ErrProxyClosed
		}
		go func() {
			defer p.wg.Done()
			p.serveConn(ctx, c)
		}()
	}
}

// track counts a goroutine that Close waits for; false once closed.
func (p *Proxy) track() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Add(1)
	return true
}

// Close stops every Serve, closes every listener and connection, and
// waits until their goroutines are done. It is safe to call more than
// once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.init()
	p.closed = true
	p.cancel()
	for l := range p.listeners {
		l.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

// Tunnel connects client to host:port as a CONNECT would, when the policy
// allows it, and splices the two until both sides are done; it closes
// client. It serves connections that arrive without a proxy protocol,
// whose destination the caller knows by other means (a transparent
// redirect, a DNS stub's synthetic address). A refusal is reported to
// OnRefuse and returned as an error, like every other failure.
func (p *Proxy) Tunnel(ctx context.Context, client net.Conn, host string, port int) error {
	defer client.Close()
	p.mu.Lock()
	p.init()
	base := p.ctx
	p.mu.Unlock()
	if !p.track() {
		return ErrProxyClosed
	}
	defer p.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(base, cancel)()
	defer context.AfterFunc(ctx, func() { client.Close() })()

	up, d, err := p.connect(ctx, ProtoTunnel, client, host, port)
	if err != nil {
		return err
	}
	if !d.Allowed {
		return fmt.Errorf("netpolicy: %s refused: %s", displayHost(d.Host), d.Reason)
	}
	p.splice(ctx, client, nil, up)
	return nil
}

// serveConn serves one accepted connection.
func (p *Proxy) serveConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	defer context.AfterFunc(ctx, func() { c.Close() })()
	deadline := time.Now().Add(p.handshakeTimeout())
	if err := c.SetDeadline(deadline); err != nil {
		return
	}
	lr := &limitReader{r: c, n: maxHeaderBytes}
	br := bufio.NewReader(lr)
	first, err := br.Peek(1)
	if err != nil {
		p.logf("client sent nothing", "client", c.RemoteAddr(), "err", err)
		return
	}
	// A connection from one of our own upstream connections is a loop:
	// the proxy was asked to connect to itself (through an address the
	// listener check below did not know of). By the time the looped
	// client sends its first byte the upstream connection is registered,
	// since the proxy sends nothing through a tunnel before that.
	if p.isOutbound(c.RemoteAddr()) {
		p.refuse(Refusal{Protocol: ProtoUnknown, Reason: "the connection loops back into the proxy", Client: c.RemoteAddr().String()})
		return
	}
	switch b := first[0]; {
	case b == 5:
		p.serveSOCKS5(ctx, c, br)
	case b == 4:
		// SOCKS4 reply: version 0, 0x5b "request rejected or failed".
		c.Write([]byte{0, 0x5b, 0, 0, 0, 0, 0, 0})
		p.refuse(Refusal{Protocol: ProtoUnknown, Reason: "SOCKS4 is not supported: use SOCKS5 or HTTP", Client: c.RemoteAddr().String()})
	case 'A' <= b && b <= 'Z':
		p.serveHTTP(ctx, c, br, lr, deadline)
	default:
		p.refuse(Refusal{Protocol: ProtoUnknown, Reason: fmt.Sprintf("not a proxy protocol (first byte 0x%02x): speak HTTP or SOCKS5", b), Client: c.RemoteAddr().String()})
	}
}

// connect checks host:port and, when allowed, connects to one of the
// checked addresses. A refusal is reported and comes back as a Decision
// that is not Allowed and a nil error; an error is a failed lookup or
// connect.
func (p *Proxy) connect(ctx context.Context, proto string, client net.Conn, host string, port int) (net.Conn, Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, p.dialTimeout())
	defer cancel()
	r := p.Resolver
	if r == nil {
		r = NetResolver(nil)
	}
	d, err := p.Policy.Check(ctx, r, host, port)
	if err != nil {
		p.logf("lookup failed", "host", d.Host, "err", err)
		return nil, d, fmt.Errorf("%w: %w", errLookup, err)
	}
	if d.Allowed {
		if self := p.selfAddr(d.Addrs, port); self.IsValid() {
			d.Allowed = false
			d.Reason = fmt.Sprintf("%s is this proxy's own listening address", netip.AddrPortFrom(self, uint16(port)))
			d.Suggestion = ""
		}
	}
	if !d.Allowed {
		p.refuse(Refusal{Protocol: proto, Host: displayHost(d.Host), Port: port, Reason: d.Reason, Suggestion: d.Suggestion, Client: client.RemoteAddr().String()})
		return nil, d, nil
	}
	dial := p.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	var errs []error
	for _, a := range d.Addrs {
		up, err := dial(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			p.addOutbound(up.LocalAddr())
			return up, d, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	err = fmt.Errorf("netpolicy: connecting to %s: %w", hostPort(d.Host, port), errors.Join(errs...))
	p.logf("connect failed", "err", err)
	return nil, d, err
}

// selfAddr returns the address among addrs at which one of our listeners
// listens on port, if any. Connecting there would chain the proxy to
// itself, a loop that allows nothing new but is never wanted; the guard
// refuses loopback anyway unless an entry lifts it, and this refuses it
// even then.
func (p *Proxy) selfAddr(addrs []netip.Addr, port int) netip.Addr {
	p.mu.Lock()
	var own []netip.AddrPort
	for l := range p.listeners {
		if ta, ok := l.Addr().(*net.TCPAddr); ok {
			ap := ta.AddrPort()
			own = append(own, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
		}
	}
	p.mu.Unlock()
	var local []netip.Addr
	localDone := false
	for _, ap := range own {
		if int(ap.Port()) != port {
			continue
		}
		for _, a := range addrs {
			if a == ap.Addr() {
				return a
			}
			if !ap.Addr().IsUnspecified() {
				continue
			}
			// A wildcard listener is reachable on every local address.
			if a.IsLoopback() || a.IsUnspecified() {
				return a
			}
			if !localDone {
				local, localDone = interfaceAddrs(), true
			}
			for _, l := range local {
				if a == l {
					return a
				}
			}
		}
	}
	return netip.Addr{}
}

func interfaceAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

func (p *Proxy) addOutbound(a net.Addr) {
	p.mu.Lock()
	p.outbound[a.String()]++
	p.mu.Unlock()
}

func (p *Proxy) removeOutbound(a net.Addr) {
	p.mu.Lock()
	k := a.String()
	if p.outbound[k]--; p.outbound[k] <= 0 {
		delete(p.outbound, k)
	}
	p.mu.Unlock()
}

func (p *Proxy) isOutbound(a net.Addr) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.outbound[a.String()] > 0
}

// splice copies both ways between client and up until both directions
// are done, passing on half-closes, then closes both. buffered holds
// bytes the client sent ahead of the proxy's reply, which go first.
func (p *Proxy) splice(ctx context.Context, client net.Conn, buffered []byte, up net.Conn) {
	defer p.removeOutbound(up.LocalAddr())
	defer up.Close()
	defer client.Close()
	defer context.AfterFunc(ctx, func() { up.Close() })()
	if len(buffered) > 0 {
		if _, err := up.Write(buffered); err != nil {
			return
		}
	}
	errc := make(chan error, 2)
	// io.Copy between two *net.TCPConn uses splice(2) on Linux.
	go func() { errc <- copyHalf(up, client) }()
	go func() { errc <- copyHalf(client, up) }()
	for range 2 {
		if err := <-errc; err != nil {
			// An error (not EOF) in one direction ends both: there is
			// nobody left to deliver the other direction's bytes to.
			client.Close()
			up.Close()
		}
	}
}

// copyHalf copies src to dst and then half-closes dst, so that the peer
// sees the EOF while the other direction goes on. Without CloseWrite a
// half-close cannot be passed on, and the whole connection ends.
func copyHalf(dst, src net.Conn) error {
	_, err := io.Copy(dst, src)
	if err != nil {
		return err
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		// An error here means the peer is gone already; the other
		// direction finds out by itself.
		cw.CloseWrite()
		return nil
	}
	return errors.New("netpolicy: connection cannot half-close")
}

func (p *Proxy) refuse(r Refusal) {
	if p.OnRefuse != nil {
		p.OnRefuse(r)
	}
}

func (p *Proxy) logf(msg string, args ...any) {
	if p.Logger != nil {
		p.Logger.Debug("netpolicy: "+msg, args...)
	}
}

func (p *Proxy) handshakeTimeout() time.Duration {
	if p.HandshakeTimeout > 0 {
		return p.HandshakeTimeout
	}
	return DefaultHandshakeTimeout
}

func (p *Proxy) dialTimeout() time.Duration {
	if p.DialTimeout > 0 {
		return p.DialTimeout
	}
	return DefaultDialTimeout
}

// limitReader returns EOF after n bytes while n >= 0; n < 0 means no
// limit. It bounds request heads without bounding request bodies.
type limitReader struct {
	r io.Reader
	n int64
}

func (l *limitReader) Read(b []byte) (int, error) {
	if l.n < 0 {
		return l.r.Read(b)
	}
	if l.n == 0 {
		return 0, errHeadTooLarge
	}
	if int64(len(b)) > l.n {
		b = b[:l.n]
	}
	n, err := l.r.Read(b)
	l.n -= int64(n)
	return n, err
}

var (
	errHeadTooLarge = errors.New("request head too large")
	// errLookup marks a failed lookup among connect's errors.
	errLookup = errors.New("lookup failed")
)
