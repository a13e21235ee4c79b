package netpolicy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// bigSize is the size of the byte-exact transfers.
const bigSize = 50 << 20

var bigData = sync.OnceValue(func() []byte {
	b := make([]byte, bigSize)
	rand.NewChaCha8([32]byte{'n', 'e', 't', 'p', 'o', 'l'}).Read(b)
	return b
})

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// env is a proxy with test servers behind it, all on 127.0.0.1.
//
// The fake resolver maps names to 127.0.0.1 and a few other addresses;
// the guard refuses loopback, so the policy lifts it explicitly for the
// test servers' ports only: "allowed.test:PORT,127.0.0.1:PORT". The
// proxy's own port is lifted only when envOpts.liftSelf is set.
type env struct {
	t        testing.TB
	web      *httptest.Server // plain HTTP
	tls      *httptest.Server // HTTPS, certificate for example.com
	raw      net.Listener     // raw TCP: SUM, GET n, HALF
	rawGot   chan string      // what HALF received after its half-close
	webPort  int
	tlsPort  int
	rawPort  int
	deadPort int // nothing listens here
	proxy    *Proxy
	addr     string // the proxy's host:port
	port     int
	served   chan error

	mu       sync.Mutex
	refusals []Refusal
	lookups  []string
}

type envOpts struct {
	liftSelf  bool
	handshake time.Duration
	dial      func(e *env) func(ctx context.Context, network, addr string) (net.Conn, error)
}

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	e := &env{t: t, rawGot: make(chan string, 1)}
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	mux.HandleFunc("/host", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Host) })
	mux.HandleFunc("/headers", func(w http.ResponseWriter, r *http.Request) {
		var keys []string
		for k := range r.Header {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		io.WriteString(w, strings.Join(keys, ","))
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(bigSize))
		w.Write(bigData())
	})
	mux.HandleFunc("/bigchunked", func(w http.ResponseWriter, r *http.Request) {
		for b := bigData(); len(b) > 0; b = b[min(len(b), 1<<20):] {
			w.Write(b[:min(len(b), 1<<20)])
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("/chunked", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hel")
		w.(http.Flusher).Flush()
		io.WriteString(w, "lo")
	})
	mux.HandleFunc("/sum", func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		fmt.Fprintf(w, "%d %x", n, h.Sum(nil))
	})
	e.web = httptest.NewServer(mux)
	t.Cleanup(e.web.Close)
	e.tls = httptest.NewTLSServer(mux)
	t.Cleanup(e.tls.Close)
	var err error
	e.raw, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.raw.Close() })
	go e.serveRaw()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.deadPort = port(dead.Addr())
	dead.Close()
	e.webPort, e.tlsPort, e.rawPort = port(e.web.Listener.Addr()), port(e.tls.Listener.Addr()), port(e.raw.Addr())

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr, e.port = l.Addr().String(), port(l.Addr())
	var entries []string
	for _, p := range []int{e.webPort, e.tlsPort, e.rawPort, e.deadPort} {
		entries = append(entries, fmt.Sprintf("allowed.test:%d,127.0.0.1:%d", p, p))
	}
	entries = append(entries,
		fmt.Sprintf("example.com:%d", e.tlsPort),
		fmt.Sprintf("private.test:%d,mixed.test:%d,gone.test:%d", e.webPort, e.webPort, e.webPort),
		fmt.Sprintf("*.wild.test:%d", e.rawPort),
		fmt.Sprintf("self.test:%d", e.port),
	)
	if o.liftSelf {
		entries = append(entries, fmt.Sprintf("127.0.0.1:%d", e.port))
	}
	pol, err := ParseAllow(entries)
	if err != nil {
		t.Fatal(err)
	}
	loop := netip.MustParseAddr("127.0.0.1")
	e.proxy = &Proxy{
		Policy: pol,
		Resolver: resolverFunc(func(host string) ([]netip.Addr, error) {
			e.mu.Lock()
			e.lookups = append(e.lookups, host)
			e.mu.Unlock()
			switch host {
			case "allowed.test", "example.com", "denied.test", "self.test", "a.wild.test":
				return []netip.Addr{loop}, nil
			case "private.test":
				return addrs("10.0.0.5"), nil
			case "mixed.test":
				return addrs("127.0.0.1", "10.0.0.5"), nil
			}
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}),
		OnRefuse: func(r Refusal) {
			e.mu.Lock()
			e.refusals = append(e.refusals, r)
			e.mu.Unlock()
		},
		HandshakeTimeout: o.handshake,
	}
	if o.dial != nil {
		e.proxy.Dial = o.dial(e)
	}
	e.served = make(chan error, 1)
	go func() { e.served <- e.proxy.Serve(l) }()
	t.Cleanup(func() {
		e.proxy.Close()
		if err := <-e.served; !errors.Is(err, ErrProxyClosed) {
			t.Errorf("Serve returned %v, want ErrProxyClosed", err)
		}
	})
	return e
}

type resolverFunc func(host string) ([]netip.Addr, error)

func (f resolverFunc) LookupNetIP(_ context.Context, host string) ([]netip.Addr, error) {
	return f(host)
}

func port(a net.Addr) int { return a.(*net.TCPAddr).Port }

// serveRaw serves the raw TCP test protocol: a first line "SUM" (read to
// EOF, answer "n sha256"), "GET n" (send n bytes of bigData, close) or
// "HALF" (send a line, half-close, read to EOF and report it on rawGot).
func (e *env) serveRaw() {
	for {
		c, err := e.raw.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			br := bufio.NewReader(c)
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			switch f := strings.Fields(line); f[0] {
			case "SUM":
				h := sha256.New()
				n, _ := io.Copy(h, br)
				fmt.Fprintf(c, "%d %x\n", n, h.Sum(nil))
			case "GET":
				if f[1] == "/hop" {
					// An HTTP origin whose response names hop-by-hop
					// headers, which Go's server would not send.
					for l, _ := br.ReadString('\n'); l != "\r\n" && l != ""; l, _ = br.ReadString('\n') {
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: X-Hop, close\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\n"+
						"Proxy-Authenticate: Basic\r\nX-End: 1\r\nContent-Length: 3\r\n\r\nhop")
					return
				}
				n, _ := strconv.Atoi(f[1])
				c.Write(bigData()[:n])
			case "HALF":
				io.WriteString(c, "server done\n")
				c.(*net.TCPConn).CloseWrite()
				b, _ := io.ReadAll(br)
				e.rawGot <- string(b)
			}
		}()
	}
}

func (e *env) takeRefusals() []Refusal {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.refusals
	e.refusals = nil
	return r
}

// wantRefusal checks that exactly one refusal was reported and that it
// matches.
func (e *env) wantRefusal(proto, host string, port int, reason, suggestion string) {
	e.t.Helper()
	// The report comes from the proxy's goroutine, possibly just after
	// the client saw the answer.
	deadline := time.Now().Add(5 * time.Second)
	var rs []Refusal
	for {
		e.mu.Lock()
		n := len(e.refusals)
		e.mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			time.Sleep(20 * time.Millisecond) // let a second, wrong one show
			rs = e.takeRefusals()
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(rs) != 1 {
		e.t.Errorf("refusals = %+v, want exactly one", rs)
		return
	}
	r := rs[0]
	if r.Protocol != proto || r.Host != host || r.Port != port || !strings.Contains(r.Reason, reason) ||
		(suggestion != "-" && r.Suggestion != suggestion) || r.Client == "" {
		e.t.Errorf("refusal = %+v; want protocol %q host %q port %d reason ~%q suggestion %q", r, proto, host, port, reason, suggestion)
	}
	if strings.ContainsAny(r.Reason, "\x00\r\n") {
		e.t.Errorf("refusal reason %q holds raw control bytes", r.Reason)
	}
	wantName := host
	if host != "" && port != 0 {
		wantName = net.JoinHostPort(host, strconv.Itoa(port))
	}
	if r.Name() != wantName {
		e.t.Errorf("refusal name %q, want %q", r.Name(), wantName)
	}
}

func (e *env) noRefusals() {
	e.t.Helper()
	time.Sleep(20 * time.Millisecond)
	if rs := e.takeRefusals(); len(rs) > 0 {
		e.t.Errorf("unexpected refusals %+v", rs)
	}
}

// client returns an HTTP client that uses the proxy through proxyURL's
// scheme and trusts the TLS test server.
func (e *env) client(scheme string) *http.Client {
	tr := e.tls.Client().Transport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(&url.URL{Scheme: scheme, Host: e.addr})
	tr.DisableCompression = true
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

func get(t *testing.T, c *http.Client, u string) (int, []byte) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", u, err)
	}
	return resp.StatusCode, b
}

// rawRequest sends raw bytes to the proxy and returns the response.
func (e *env) rawRequest(payload string) (int, string) {
	e.t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, payload); err != nil {
		e.t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		e.t.Fatalf("reading the answer to %q: %v", payload, err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// connect opens a CONNECT tunnel through the proxy.
func (e *env) connect(target string) (net.Conn, *bufio.Reader) {
	e.t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		e.t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(60 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		e.t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	return c, br
}

// socks5 runs a SOCKS5 handshake and returns the connection and the
// reply code.
func (e *env) socks5(cmd, atyp byte, addr []byte, port int) (net.Conn, byte) {
	e.t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		e.t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(60 * time.Second))
	c.Write([]byte{5, 1, 0})
	var m [2]byte
	if _, err := io.ReadFull(c, m[:]); err != nil || m != [2]byte{5, 0} {
		e.t.Fatalf("SOCKS5 method selection: %v %v", m, err)
	}
	req := []byte{5, cmd, 0, atyp}
	if atyp == 3 {
		req = append(req, byte(len(addr)))
	}
	req = append(req, addr...)
	req = append(req, byte(port>>8), byte(port))
	c.Write(req)
	var rep [10]byte
	if _, err := io.ReadFull(c, rep[:]); err != nil {
		e.t.Fatalf("SOCKS5 reply: %v", err)
	}
	if rep[0] != 5 || rep[3] != 1 {
		e.t.Fatalf("SOCKS5 reply %v", rep)
	}
	return c, rep[1]
}

func (e *env) socksOK(atyp byte, addr []byte, port int) net.Conn {
	e.t.Helper()
	c, code := e.socks5(1, atyp, addr, port)
	if code != 0 {
		c.Close()
		e.t.Fatalf("SOCKS5 CONNECT %q:%d: reply %#x", addr, port, code)
	}
	return c
}

func TestProxyHTTPForward(t *testing.T) {
	e := newEnv(t, envOpts{})
	c := e.client("http")
	base := fmt.Sprintf("http://allowed.test:%d", e.webPort)
	if code, b := get(t, c, base+"/hello"); code != 200 || string(b) != "hello" {
		t.Errorf("GET /hello = %d %q", code, b)
	}

	// The authority is checked and becomes the Host header; the client's
	// Host header is dropped.
	code, body := e.rawRequest(fmt.Sprintf("GET %s/host HTTP/1.1\r\nHost: evil.test\r\n\r\n", base))
	if want := fmt.Sprintf("allowed.test:%d", e.webPort); code != 200 || body != want {
		t.Errorf("origin saw Host %q (%d), want %q", body, code, want)
	}

	// Hop-by-hop and Proxy-* headers stay at the proxy.
	req, _ := http.NewRequest("GET", base+"/headers", nil)
	req.Header.Set("Proxy-Authorization", "Basic eDp5")
	req.Header.Set("Proxy-Foo", "1")
	req.Header.Set("Connection", "X-Secret")
	req.Header.Set("X-Secret", "1")
	req.Header.Set("Keep-Alive", "timeout=5")
	req.Header.Set("X-Kept", "1")
	req.Header.Set("User-Agent", "test")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got, want := string(b), "Connection,User-Agent,X-Kept"; got != want {
		// Connection: close is the proxy's own, for its upstream hop.
		t.Errorf("origin saw headers %q, want %q", got, want)
	}

	// Keep-alive: the second request reuses the client connection.
	var reused bool
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
	req, _ = http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", base+"/hello", nil)
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if !reused {
		t.Error("the client connection to the proxy was not reused")
	}

	// IP literals, in any spelling, are judged as the address they are.
	for _, host := range []string{"127.0.0.1", "2130706433", "0x7f.1", "0177.0.0.1", "127.1", "[::ffff:127.0.0.1]"} {
		u := fmt.Sprintf("http://%s:%d/hello", host, e.webPort)
		if code, b := get(t, c, u); code != 200 || string(b) != "hello" {
			t.Errorf("GET %s = %d %q", u, code, b)
		}
	}
	e.noRefusals()
}

func TestProxyCONNECT(t *testing.T) {
	e := newEnv(t, envOpts{})
	c := e.client("http")
	u := fmt.Sprintf("https://example.com:%d/hello", e.tlsPort)
	if code, b := get(t, c, u); code != 200 || string(b) != "hello" {
		t.Errorf("GET %s = %d %q", u, code, b)
	}
	e.noRefusals()
}

func TestProxySOCKS5(t *testing.T) {
	e := newEnv(t, envOpts{})
	// Go's SOCKS5 client sends names as names (remote resolution).
	c := e.client("socks5")
	u := fmt.Sprintf("http://allowed.test:%d/hello", e.webPort)
	if code, b := get(t, c, u); code != 200 || string(b) != "hello" {
		t.Errorf("GET %s via SOCKS5 = %d %q", u, code, b)
	}
	u = fmt.Sprintf("https://example.com:%d/hello", e.tlsPort)
	if code, b := get(t, c, u); code != 200 || string(b) != "hello" {
		t.Errorf("GET %s via SOCKS5 = %d %q", u, code, b)
	}

	// Each address type, by hand.
	for _, tt := range []struct {
		name string
		atyp byte
		addr []byte
	}{
		{"domain", 3, []byte("allowed.test")},
		{"domain wildcard", 3, []byte("A.Wild.Test.")},
		{"ipv4", 1, []byte{127, 0, 0, 1}},
		{"ipv6 mapped", 4, netip.MustParseAddr("::ffff:127.0.0.1").AsSlice()},
	} {
		conn := e.socksOK(tt.atyp, tt.addr, e.rawPort)
		fmt.Fprintf(conn, "GET 5\n")
		b, err := io.ReadAll(conn)
		conn.Close()
		if err != nil || !bytes.Equal(b, bigData()[:5]) {
			t.Errorf("%s: got %q, %v", tt.name, b, err)
		}
	}
	e.noRefusals()
}

func TestProxyBigTransfers(t *testing.T) {
	if testing.Short() {
		t.Skip("50 MB transfers")
	}
	e := newEnv(t, envOpts{})
	want := sum(bigData())
	httpc, socksc := e.client("http"), e.client("socks5")
	for _, tt := range []struct {
		name string
		c    *http.Client
		url  string
	}{
		{"http forward", httpc, fmt.Sprintf("http://allowed.test:%d/big", e.webPort)},
		{"http forward chunked", httpc, fmt.Sprintf("http://allowed.test:%d/bigchunked", e.webPort)},
		{"connect", httpc, fmt.Sprintf("https://example.com:%d/big", e.tlsPort)},
		{"socks5", socksc, fmt.Sprintf("http://allowed.test:%d/big", e.webPort)},
	} {
		code, b := get(t, tt.c, tt.url)
		if code != 200 || len(b) != bigSize || sum(b) != want {
			t.Errorf("%s: GET %s = %d, %d bytes, sha256 %s; want %d bytes %s", tt.name, tt.url, code, len(b), sum(b), bigSize, want)
		}
	}

	// Uploads: chunked through the forward proxy, raw through SOCKS5
	// and CONNECT.
	wantSum := fmt.Sprintf("%d %s", bigSize, want)
	resp, err := httpc.Post(fmt.Sprintf("http://allowed.test:%d/sum", e.webPort), "application/octet-stream",
		io.MultiReader(bytes.NewReader(bigData()))) // hides the length: chunked
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != wantSum {
		t.Errorf("chunked upload: origin got %q, want %q", b, wantSum)
	}
	upload := func(name string, conn net.Conn, br io.Reader) {
		defer conn.Close()
		go func() {
			io.WriteString(conn, "SUM\n")
			conn.Write(bigData())
			conn.(*net.TCPConn).CloseWrite()
		}()
		b, err := io.ReadAll(br)
		if got := strings.TrimSpace(string(b)); err != nil || got != wantSum {
			t.Errorf("%s upload: origin got %q, %v; want %q", name, got, err, wantSum)
		}
	}
	conn := e.socksOK(3, []byte("allowed.test"), e.rawPort)
	upload("socks5", conn, conn)
	conn, br := e.connect(fmt.Sprintf("allowed.test:%d", e.rawPort))
	upload("connect", conn, br)

	// Raw download through SOCKS5.
	conn = e.socksOK(1, []byte{127, 0, 0, 1}, e.rawPort)
	fmt.Fprintf(conn, "GET %d\n", bigSize)
	b, err = io.ReadAll(conn)
	conn.Close()
	if err != nil || len(b) != bigSize || sum(b) != want {
		t.Errorf("socks5 raw download: %d bytes, %v", len(b), err)
	}
	e.noRefusals()
}

func TestProxyHalfClose(t *testing.T) {
	e := newEnv(t, envOpts{})
	check := func(name string, conn net.Conn, br io.Reader) {
		t.Helper()
		defer conn.Close()
		io.WriteString(conn, "HALF\n")
		// The server half-closes after one line: we see EOF while our
		// own direction stays open...
		b, err := io.ReadAll(br)
		if err != nil || string(b) != "server done\n" {
			t.Errorf("%s: read %q, %v before EOF", name, b, err)
		}
		// ...and what we send after that still arrives, ended by our own
		// half-close.
		io.WriteString(conn, "late data")
		conn.(*net.TCPConn).CloseWrite()
		select {
		case got := <-e.rawGot:
			if got != "late data" {
				t.Errorf("%s: server got %q after its half-close", name, got)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: the client's half-close did not reach the server", name)
		}
	}
	conn, br := e.connect(fmt.Sprintf("allowed.test:%d", e.rawPort))
	check("connect", conn, br)
	conn = e.socksOK(3, []byte("allowed.test"), e.rawPort)
	check("socks5", conn, conn)
	e.noRefusals()
}

func TestProxyRefusesHTTP(t *testing.T) {
	e := newEnv(t, envOpts{})
	c := e.client("http")
	for _, tt := range []struct {
		url, host  string
		port       int
		reason     string
		suggestion string
	}{
		{fmt.Sprintf("http://denied.test:%d/", e.webPort), "denied.test", e.webPort,
			fmt.Sprintf("denied.test:%d is not in the allow list", e.webPort), fmt.Sprintf("--allow-net denied.test:%d", e.webPort)},
		{fmt.Sprintf("http://private.test:%d/", e.webPort), "private.test", e.webPort,
			"private.test resolves to a private address 10.0.0.5", fmt.Sprintf("--allow-net 10.0.0.5:%d", e.webPort)},
		{fmt.Sprintf("http://mixed.test:%d/", e.webPort), "mixed.test", e.webPort,
			"mixed.test resolves to a private address 10.0.0.5 (one of 2", "-"},
		{"http://allowed.test/", "allowed.test", 80, "allowed.test is allowed only on port", "--allow-net allowed.test:80"},
		{"http://2130706433/", "127.0.0.1", 80, "127.0.0.1:80 is not in the allow list (127.0.0.1 is a loopback address)", "--allow-net 127.0.0.1:80"},
		{"http://169.254.169.254/latest/meta-data/", "169.254.169.254", 80, "cloud metadata", "-"},
		{"http://[::1]:8080/", "::1", 8080, "loopback", "--allow-net [::1]:8080"},
		{"http://[fd00:ec2::254]/", "fd00:ec2::254", 80, "cloud metadata", "-"},
		{fmt.Sprintf("http://127.0.0.1:%d/", e.port), "127.0.0.1", e.port, "loopback", "-"},
	} {
		code, b := get(t, c, tt.url)
		if code != http.StatusForbidden || !strings.Contains(string(b), tt.reason) || strings.Count(string(b), "\n") != 1 {
			t.Errorf("GET %s = %d %q; want 403 naming %q on one line", tt.url, code, b, tt.reason)
		}
		e.wantRefusal(ProtoHTTP, tt.host, tt.port, tt.reason, tt.suggestion)
	}
	e.mu.Lock()
	lookups := slices.Clone(e.lookups)
	e.mu.Unlock()
	if slices.Contains(lookups, "denied.test") {
		t.Errorf("the proxy looked up a name the list does not allow: %q", lookups)
	}

	// Not proxy requests.
	code, body := e.rawRequest(fmt.Sprintf("GET /hello HTTP/1.1\r\nHost: allowed.test:%d\r\n\r\n", e.webPort))
	if code != 400 || !strings.Contains(body, "not a proxy request") {
		t.Errorf("origin-form request = %d %q", code, body)
	}
	e.wantRefusal(ProtoHTTP, "", 0, "GET /hello is not a proxy request", "")
	code, body = e.rawRequest("GET https://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	if code != 400 || !strings.Contains(body, "use CONNECT") {
		t.Errorf("absolute https request = %d %q", code, body)
	}
	e.wantRefusal(ProtoHTTP, "allowed.test", 0, `scheme "https" is not forwarded`, "")
	code, body = e.rawRequest("GET http://evil.com%00.allowed.test/ HTTP/1.1\r\n\r\n")
	if code != 400 {
		t.Errorf("percent-encoded NUL = %d %q", code, body)
	}
	e.wantRefusal(ProtoHTTP, "http://evil.com%00.allowed.test/", 0, "malformed request", "")
	code, body = e.rawRequest("GET http://evil.com\x00.allowed.test/ HTTP/1.1\r\n\r\n")
	if code != 400 {
		t.Errorf("raw NUL = %d %q", code, body)
	}
	e.wantRefusal(ProtoHTTP, `"http://evil.com\x00.allowed.test/"`, 0, "malformed request", "")
	code, body = e.rawRequest("GET http://evil.com!.allowed.test/ HTTP/1.1\r\n\r\n")
	if code != 400 || !strings.Contains(body, "'!'") {
		t.Errorf("bad byte = %d %q", code, body)
	}
	e.wantRefusal(ProtoHTTP, "evil.com!.allowed.test", 80, "'!'", "")
}

func TestProxyRefusesCONNECT(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, tt := range []struct {
		target     string
		code       int
		host       string
		port       int
		reason     string
		suggestion string
	}{
		{"denied.test:443", 403, "denied.test", 443, "denied.test:443 is not in the allow list", "--allow-net denied.test:443"},
		{fmt.Sprintf("private.test:%d", e.webPort), 403, "private.test", e.webPort, "resolves to a private address 10.0.0.5", "-"},
		{"allowed.test:22", 403, "allowed.test", 22, "allowed only on port", "--allow-net allowed.test:22"},
		{"[::1]:" + strconv.Itoa(e.webPort), 403, "::1", e.webPort, "loopback", "-"},
		{"evil.com!.allowed.test:443", 400, "evil.com!.allowed.test", 443, "'!'", ""},
		{"evil.com$.allowed.test:443", 400, "evil.com$.allowed.test", 443, "'$'", ""},
		{"evil.com:443@allowed.test:443", 400, "evil.com:443@allowed.test:443", 0, "bad CONNECT target", ""},
		{"allowed.test", 400, "allowed.test", 0, "missing port", ""},
		{"allowed.test:0", 400, "allowed.test:0", 0, "out of range", ""},
		{"1.2.3.4.5:443", 400, "1.2.3.4.5", 443, "not a valid IPv4", ""},
		{"example.123:443", 400, "example.123", 443, "not a valid IPv4", ""},
		// The proxy's own address: loopback, refused by the guard.
		{e.addr, 403, "127.0.0.1", e.port, "loopback", "-"},
		{fmt.Sprintf("self.test:%d", e.port), 403, "self.test", e.port, "loopback", "-"},
		{fmt.Sprintf("localhost:%d", e.port), 403, "localhost", e.port, "not in the allow list", "-"},
	} {
		code, body := e.rawRequest(fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", tt.target, tt.target))
		if code != tt.code || !strings.Contains(body, tt.reason) {
			t.Errorf("CONNECT %s = %d %q; want %d naming %q", tt.target, code, body, tt.code, tt.reason)
		}
		e.wantRefusal(ProtoConnect, tt.host, tt.port, tt.reason, tt.suggestion)
	}

	// Every spelling of 127.0.0.1 on a port that is not lifted, and of
	// the metadata address.
	for _, h := range []string{"2130706433", "0x7f000001", "017700000001", "0x7f.1", "0177.0.0.1", "127.1", "127.0.1",
		"[::ffff:127.0.0.1]", "[0:0:0:0:0:ffff:7f00:1]", "[::ffff:7f00:1]"} {
		code, body := e.rawRequest(fmt.Sprintf("CONNECT %s:443 HTTP/1.1\r\n\r\n", h))
		if code != 403 || !strings.Contains(body, "127.0.0.1:443 is not in the allow list (127.0.0.1 is a loopback address)") {
			t.Errorf("CONNECT %s:443 = %d %q", h, code, body)
		}
		e.wantRefusal(ProtoConnect, "127.0.0.1", 443, "loopback", "--allow-net 127.0.0.1:443")
	}
	for _, h := range []string{"169.254.169.254", "2852039166", "0xa9fea9fe", "025177524776", "0251.0376.0251.0376",
		"0xa9.0xfe.0xa9.0xfe", "169.254.43518", "169.16689662", "[::ffff:169.254.169.254]", "[::ffff:a9fe:a9fe]"} {
		code, body := e.rawRequest(fmt.Sprintf("CONNECT %s:80 HTTP/1.1\r\n\r\n", h))
		if code != 403 || !strings.Contains(body, "169.254.169.254 is a cloud metadata address") {
			t.Errorf("CONNECT %s:80 = %d %q", h, code, body)
		}
		e.wantRefusal(ProtoConnect, "169.254.169.254", 80, "cloud metadata", "-")
	}

	// A lifted port accepts every spelling.
	for _, h := range []string{"2130706433", "0x7f.1", "127.1", "[::ffff:127.0.0.1]"} {
		conn, br := e.connect(fmt.Sprintf("%s:%d", h, e.rawPort))
		io.WriteString(conn, "GET 3\n")
		b, _ := io.ReadAll(br)
		conn.Close()
		if !bytes.Equal(b, bigData()[:3]) {
			t.Errorf("CONNECT %s:%d: got %q", h, e.rawPort, b)
		}
	}

	// Raw control bytes in the target: the request is malformed.
	for _, target := range []string{"evil.com\x00.allowed.test:443", "evil.com\x01.allowed.test:443", "evil.com\x7f.allowed.test:443"} {
		code, _ := e.rawRequest("CONNECT " + target + " HTTP/1.1\r\n\r\n")
		if code != 400 {
			t.Errorf("CONNECT %q = %d, want 400", target, code)
		}
		e.wantRefusal(ProtoHTTP, strconv.Quote(target), 0, "malformed request", "")
	}

	// A Host header naming another host changes nothing: the target is
	// checked and connected to.
	conn, br := e.connect(fmt.Sprintf("allowed.test:%d", e.rawPort))
	io.WriteString(conn, "GET 2\n")
	if b, _ := io.ReadAll(br); !bytes.Equal(b, bigData()[:2]) {
		t.Errorf("tunnel got %q", b)
	}
	conn.Close()
	e.noRefusals()
}

func TestProxyRefusesSOCKS5(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, tt := range []struct {
		name       string
		cmd, atyp  byte
		addr       []byte
		port       int
		code       byte
		host       string
		reason     string
		suggestion string
	}{
		{"NUL in name", 1, 3, []byte("evil.com\x00.allowed.test"), e.rawPort, 2, `"evil.com\x00.allowed.test"`, `'\x00'`, ""},
		{"newline in name", 1, 3, []byte("allowed.test\n"), e.rawPort, 2, `"allowed.test\n"`, `'\n'`, ""},
		{"slash in name", 1, 3, []byte("evil.com/.allowed.test"), e.rawPort, 2, "evil.com/.allowed.test", "'/'", ""},
		{"empty name", 1, 3, []byte{}, e.rawPort, 2, "", "empty host", ""},
		{"denied name", 1, 3, []byte("denied.test"), e.rawPort, 2, "denied.test", "not in the allow list", fmt.Sprintf("--allow-net denied.test:%d", e.rawPort)},
		{"rebinding", 1, 3, []byte("private.test"), e.webPort, 2, "private.test", "private address 10.0.0.5", "-"},
		{"decimal literal as name", 1, 3, []byte("2130706433"), 443, 2, "127.0.0.1", "loopback", "--allow-net 127.0.0.1:443"},
		{"private ipv4", 1, 1, []byte{10, 0, 0, 5}, 80, 2, "10.0.0.5", "private", "--allow-net 10.0.0.5:80"},
		{"metadata ipv4", 1, 1, []byte{169, 254, 169, 254}, 80, 2, "169.254.169.254", "cloud metadata", "-"},
		{"loopback ipv6", 1, 4, netip.IPv6Loopback().AsSlice(), e.rawPort, 2, "::1", "loopback", "-"},
		{"port 0", 1, 3, []byte("allowed.test"), 0, 2, "allowed.test", "port 0 is out of range", ""},
		{"proxy itself", 1, 1, []byte{127, 0, 0, 1}, e.port, 2, "127.0.0.1", "loopback", "-"},
		{"BIND", 2, 3, []byte("allowed.test"), e.rawPort, 7, "allowed.test", "SOCKS5 BIND is not supported", ""},
		{"UDP ASSOCIATE", 3, 1, []byte{0, 0, 0, 0}, 0, 7, "0.0.0.0", "SOCKS5 UDP ASSOCIATE is not supported", ""},
		{"unknown command", 9, 3, []byte("allowed.test"), e.rawPort, 7, "allowed.test", "command 9", ""},
	} {
		conn, code := e.socks5(tt.cmd, tt.atyp, tt.addr, tt.port)
		conn.Close()
		if code != tt.code {
			t.Errorf("%s: reply %#x, want %#x", tt.name, code, tt.code)
		}
		e.wantRefusal(ProtoSOCKS5, tt.host, tt.port, tt.reason, tt.suggestion)
	}

	// An unknown address type.
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	conn.Write([]byte{5, 1, 0, 5, 1, 0, 9, 1, 2, 3, 4, 0, 80})
	b, _ := io.ReadAll(conn)
	conn.Close()
	if len(b) != 12 || b[3] != 8 {
		t.Errorf("unknown address type: got %v, want method 0 then reply 8", b)
	}
	e.wantRefusal(ProtoSOCKS5, "", 0, "address type 9", "")

	// No acceptable authentication method.
	conn, _ = net.Dial("tcp", e.addr)
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	conn.Write([]byte{5, 1, 2})
	b, _ = io.ReadAll(conn)
	conn.Close()
	if !bytes.Equal(b, []byte{5, 0xff}) {
		t.Errorf("username/password only: got %v, want [5 255]", b)
	}
	e.wantRefusal(ProtoSOCKS5, "", 0, "only no authentication", "")

	// SOCKS4 and not a proxy protocol at all.
	conn, _ = net.Dial("tcp", e.addr)
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	conn.Write([]byte{4, 1, 0, 80, 127, 0, 0, 1, 0})
	b, _ = io.ReadAll(conn)
	conn.Close()
	if len(b) != 8 || b[1] != 0x5b {
		t.Errorf("SOCKS4: got %v", b)
	}
	e.wantRefusal(ProtoUnknown, "", 0, "SOCKS4 is not supported", "")
	conn, _ = net.Dial("tcp", e.addr)
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	conn.Write([]byte{0x16, 3, 1, 0, 5})
	b, _ = io.ReadAll(conn)
	conn.Close()
	if len(b) != 0 {
		t.Errorf("TLS to the proxy: got %v", b)
	}
	e.wantRefusal(ProtoUnknown, "", 0, "first byte 0x16", "")
}

func TestProxyFailuresAreNotRefusals(t *testing.T) {
	e := newEnv(t, envOpts{})
	code, body := e.rawRequest(fmt.Sprintf("CONNECT gone.test:%d HTTP/1.1\r\n\r\n", e.webPort))
	if code != http.StatusBadGateway || !strings.Contains(body, "looking up gone.test") {
		t.Errorf("CONNECT to an allowed name that does not resolve = %d %q", code, body)
	}
	if conn, code := e.socks5(1, 3, []byte("gone.test"), e.webPort); conn.Close() != nil || code != 4 {
		t.Errorf("SOCKS5 to an allowed name that does not resolve: reply %#x, want 4", code)
	}
	code, body = e.rawRequest(fmt.Sprintf("GET http://allowed.test:%d/ HTTP/1.1\r\n\r\n", e.deadPort))
	if code != http.StatusBadGateway || !strings.Contains(body, "connecting to allowed.test") {
		t.Errorf("GET from a closed port = %d %q", code, body)
	}
	if conn, code := e.socks5(1, 3, []byte("allowed.test"), e.deadPort); conn.Close() != nil || code != 5 {
		t.Errorf("SOCKS5 to a closed port: reply %#x, want 5", code)
	}
	e.noRefusals()
}

func TestProxyRefusesItselfWhenLifted(t *testing.T) {
	e := newEnv(t, envOpts{liftSelf: true})
	for _, target := range []string{e.addr, fmt.Sprintf("self.test:%d", e.port), fmt.Sprintf("0x7f.1:%d", e.port)} {
		code, body := e.rawRequest(fmt.Sprintf("CONNECT %s HTTP/1.1\r\n\r\n", target))
		if code != 403 || !strings.Contains(body, "this proxy's own listening address") {
			t.Errorf("CONNECT %s = %d %q", target, code, body)
		}
		host, _, _ := strings.Cut(target, ":")
		if host != "self.test" {
			host = "127.0.0.1"
		}
		e.wantRefusal(ProtoConnect, host, e.port, "own listening address", "")
	}
	code, body := e.rawRequest(fmt.Sprintf("GET http://127.0.0.1:%d/ HTTP/1.1\r\n\r\n", e.port))
	if code != 403 {
		t.Errorf("GET through the proxy to itself = %d %q", code, body)
	}
	e.wantRefusal(ProtoHTTP, "127.0.0.1", e.port, "own listening address", "")
	conn, code2 := e.socks5(1, 1, []byte{127, 0, 0, 1}, e.port)
	conn.Close()
	if code2 != 2 {
		t.Errorf("SOCKS5 to the proxy itself: reply %#x", code2)
	}
	e.wantRefusal(ProtoSOCKS5, "127.0.0.1", e.port, "own listening address", "")
}

func TestProxyDetectsLoop(t *testing.T) {
	// A Dial that leads back to the proxy whatever the address (as a port
	// forward or NAT the listener check cannot see would): the proxy
	// recognises its own upstream connection arriving.
	e := newEnv(t, envOpts{dial: func(e *env) func(ctx context.Context, network, addr string) (net.Conn, error) {
		return func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, e.addr)
		}
	}})
	conn, br := e.connect(fmt.Sprintf("allowed.test:%d", e.rawPort))
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT allowed.test:%d HTTP/1.1\r\n\r\n", e.rawPort)
	b, _ := io.ReadAll(br)
	if len(b) != 0 {
		t.Errorf("the looped connection answered %q", b)
	}
	e.wantRefusal(ProtoUnknown, "", 0, "loops back into the proxy", "")
}

func TestProxyHandshakeTimeout(t *testing.T) {
	e := newEnv(t, envOpts{handshake: 200 * time.Millisecond})
	for _, payload := range []string{"", "CONNECT allowed.test", "\x05"} {
		conn, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(conn, payload)
		start := time.Now()
		b, err := io.ReadAll(conn)
		conn.Close()
		if err != nil || time.Since(start) > 5*time.Second {
			t.Errorf("after %q: %v after %v", payload, err, time.Since(start))
		}
		if payload == "CONNECT allowed.test" && !strings.HasPrefix(string(b), "HTTP/1.1 408") {
			t.Errorf("after a partial request: %q, want a 408", b)
		}
	}
	// A tunnel that is quiet for longer stays up.
	conn, br := e.connect(fmt.Sprintf("allowed.test:%d", e.rawPort))
	time.Sleep(500 * time.Millisecond)
	io.WriteString(conn, "GET 4\n")
	if b, _ := io.ReadAll(br); !bytes.Equal(b, bigData()[:4]) {
		t.Errorf("a quiet tunnel was cut: got %q", b)
	}
	conn.Close()
	e.noRefusals()
}

func TestProxyCloseEndsEverything(t *testing.T) {
	e := newEnv(t, envOpts{})
	// An open tunnel, waiting for our data, and an idle client.
	tunnel, br := e.connect(fmt.Sprintf("allowed.test:%d", e.rawPort))
	io.WriteString(tunnel, "SUM\n")
	idle, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	idle.SetDeadline(time.Now().Add(10 * time.Second))
	done := make(chan struct{})
	go func() { e.proxy.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	select {
	case err := <-e.served:
		e.served <- err // for the cleanup's check
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	// Ended either way: an end of stream, or a reset when the proxy
	// closed with bytes of ours still unread (TCP then sends RST).
	if _, err := io.ReadAll(br); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("tunnel after Close: %v", err)
	}
	if _, err := io.ReadAll(idle); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("idle client after Close: %v", err)
	}
	tunnel.Close()
	idle.Close()
	if _, err := net.Dial("tcp", e.addr); err == nil {
		t.Error("the listener still accepts after Close")
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	if err := e.proxy.Serve(l); !errors.Is(err, ErrProxyClosed) {
		t.Errorf("Serve after Close = %v", err)
	}
	e.proxy.Close() // twice is fine
}

func TestProxyServeContext(t *testing.T) {
	pol, _ := ParseAllow(nil)
	p := &Proxy{Policy: pol}
	defer p.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- p.ServeContext(ctx, l) }()
	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-served; !errors.Is(err, context.Canceled) {
		t.Errorf("ServeContext = %v, want context.Canceled", err)
	}
	if _, err := io.ReadAll(conn); err != nil {
		t.Errorf("client after cancel: %v", err)
	}
	conn.Close()
}

func TestProxyTunnel(t *testing.T) {
	e := newEnv(t, envOpts{})
	pair := func() (client, server net.Conn) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		client, err = net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		server, err = l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return client, server
	}
	client, server := pair()
	errc := make(chan error, 1)
	go func() { errc <- e.proxy.Tunnel(context.Background(), server, "allowed.test", e.rawPort) }()
	io.WriteString(client, "GET 6\n")
	if b, _ := io.ReadAll(client); !bytes.Equal(b, bigData()[:6]) {
		t.Errorf("Tunnel: got %q", b)
	}
	client.Close()
	if err := <-errc; err != nil {
		t.Errorf("Tunnel = %v", err)
	}
	e.noRefusals()

	client, server = pair()
	err := e.proxy.Tunnel(context.Background(), server, "denied.test", 22)
	if err == nil || !strings.Contains(err.Error(), "not in the allow list") {
		t.Errorf("Tunnel to a denied host = %v", err)
	}
	if b, _ := io.ReadAll(client); len(b) != 0 {
		t.Errorf("refused Tunnel sent %q", b)
	}
	client.Close()
	e.wantRefusal(ProtoTunnel, "denied.test", 22, "not in the allow list", "--allow-net denied.test:22")
}

// rawExchange sends raw bytes to the proxy and returns all it answers
// until it closes.
func (e *env) rawExchange(payload string) string {
	e.t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, payload)
	b, _ := io.ReadAll(c)
	return string(b)
}

func TestProxyHTTPDetails(t *testing.T) {
	e := newEnv(t, envOpts{})
	base := fmt.Sprintf("http://allowed.test:%d", e.webPort)

	// Expect: 100-continue is answered by the proxy once the target is
	// allowed; the body follows.
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST %s/sum HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n", base)
	br := bufio.NewReader(c)
	line, _ := br.ReadString('\n')
	if line != "HTTP/1.1 100 Continue\r\n" {
		t.Errorf("Expect: 100-continue: got %q", line)
	}
	br.ReadString('\n')
	io.WriteString(c, "hello")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if want := "5 " + sum([]byte("hello")); string(b) != want {
		t.Errorf("POST after 100 Continue: %q, want %q", b, want)
	}
	c.Close()

	// An HTTP/1.0 client gets a chunked body unchunked, up to EOF.
	out := e.rawExchange(fmt.Sprintf("GET %s/chunked HTTP/1.0\r\n\r\n", base))
	if !strings.HasSuffix(out, "\r\n\r\nhello") || strings.Contains(strings.ToLower(out), "chunked") {
		t.Errorf("HTTP/1.0 client got %q", out)
	}

	// Hop-by-hop headers of the response stay at the proxy.
	out = e.rawExchange(fmt.Sprintf("GET http://allowed.test:%d/hop HTTP/1.1\r\nConnection: close\r\n\r\n", e.rawPort))
	if !strings.Contains(out, "X-End: 1") || !strings.HasSuffix(out, "hop") ||
		strings.Contains(out, "X-Hop") || strings.Contains(out, "Proxy-Authenticate") || strings.Contains(out, "Keep-Alive") {
		t.Errorf("response headers: %q", out)
	}

	// Pipelined requests on one connection, each checked on its own.
	out = e.rawExchange(fmt.Sprintf("GET %s/hello HTTP/1.1\r\n\r\nGET http://denied.test:%d/ HTTP/1.1\r\n\r\n", base, e.webPort))
	if !strings.Contains(out, "hello") || !strings.Contains(out, "403 Forbidden") {
		t.Errorf("pipelined requests: %q", out)
	}
	e.wantRefusal(ProtoHTTP, "denied.test", e.webPort, "not in the allow list", "-")

	// A request head without end.
	out = e.rawExchange("GET " + base + "/hello HTTP/1.1\r\nX-Big: " + strings.Repeat("a", 2<<20) + "\r\n\r\n")
	if !strings.HasPrefix(out, "HTTP/1.1 400") || !strings.Contains(out, "too large") {
		t.Errorf("huge request head: %.200q", out)
	}
	e.wantRefusal(ProtoHTTP, base+"/hello", 0, "too large", "")
}

func TestProxyWildcardListener(t *testing.T) {
	// On a wildcard listener, every local address with the proxy's port
	// is the proxy itself, even when an entry lifts it.
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	p := port(l.Addr())
	entries := []string{fmt.Sprintf("127.0.0.1:%d,127.0.0.2:%d", p, p)}
	var local []netip.Addr
	for _, a := range interfaceAddrs() {
		if a.Is4() && !a.IsLoopback() {
			local = append(local, a)
			entries = append(entries, fmt.Sprintf("%s:%d", a, p))
		}
	}
	pol, err := ParseAllow(entries)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var refusals []Refusal
	px := &Proxy{Policy: pol, OnRefuse: func(r Refusal) { mu.Lock(); refusals = append(refusals, r); mu.Unlock() }}
	go px.Serve(l)
	defer px.Close()
	for _, a := range append([]netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")}, local...) {
		target := netip.AddrPortFrom(a, uint16(p)).String()
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", target)
		b, _ := io.ReadAll(c)
		c.Close()
		if !strings.HasPrefix(string(b), "HTTP/1.1 403") || !strings.Contains(string(b), "own listening address") {
			t.Errorf("CONNECT %s on a wildcard listener: %q", target, b)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(refusals) != 2+len(local) {
		t.Errorf("refusals: %+v", refusals)
	}
}

func TestNetResolver(t *testing.T) {
	// localhost comes from /etc/hosts or the resolver's own rule, never
	// from the network.
	got, err := NetResolver(nil).LookupNetIP(context.Background(), "localhost")
	if err != nil {
		t.Skipf("no localhost here: %v", err)
	}
	for _, a := range got {
		if !a.Unmap().IsLoopback() {
			t.Errorf("localhost resolves to %v", got)
		}
	}
}
