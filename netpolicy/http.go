package netpolicy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"
)

// serveHTTP serves an HTTP proxy client: a CONNECT, or absolute-form
// requests with keep-alive between them. Each request opens its own
// upstream connection, checked on its own, since one client connection
// may ask for a different host every time.
// deadline is the first request's, which serveConn set.
func (p *Proxy) serveHTTP(ctx context.Context, c net.Conn, br *bufio.Reader, lr *limitReader, deadline time.Time) {
	for first := true; ; first = false {
		if !first {
			deadline = time.Now().Add(p.handshakeTimeout())
			if err := c.SetDeadline(deadline); err != nil {
				return
			}
			if _, err := br.Peek(1); err != nil {
				return // the client is done, or idle for too long
			}
		}
		lr.n = maxHeaderBytes
		line := peekLine(br)
		req, err := http.ReadRequest(br)
		lr.n = -1
		if err != nil {
			// bufio hands a partial line over without its timeout error,
			// so a slow client may look like a malformed one: the clock
			// tells them apart.
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || !time.Now().Before(deadline) {
				// Too slow is not a refusal: say so and hang up.
				p.logf("request head timed out", "client", c.RemoteAddr())
				p.httpReply(c, http.StatusRequestTimeout, "the request did not arrive in time")
				return
			}
			target := requestTarget(line)
			p.refuse(Refusal{Protocol: ProtoHTTP, Host: displayHost(target), Reason: "malformed request: " + oneLine(err.Error()), Client: c.RemoteAddr().String()})
			p.httpReply(c, http.StatusBadRequest, "malformed request: "+err.Error())
			return
		}
		if req.Method == http.MethodConnect {
			p.serveConnect(ctx, c, br, req)
			return
		}
		if !p.forward(ctx, c, req) {
			return
		}
	}
}

// serveConnect answers a CONNECT and splices the tunnel.
func (p *Proxy) serveConnect(ctx context.Context, c net.Conn, br *bufio.Reader, req *http.Request) {
	target := req.RequestURI
	host, port, err := splitAuthority(target, 0)
	if err != nil {
		reason := fmt.Sprintf("bad CONNECT target %s: %v", displayHost(target), err)
		p.refuse(Refusal{Protocol: ProtoConnect, Host: displayHost(target), Reason: reason, Client: c.RemoteAddr().String()})
		p.httpReply(c, http.StatusBadRequest, reason)
		return
	}
	up, d, err := p.connect(ctx, ProtoConnect, c, host, port)
	if err != nil {
		p.httpReply(c, http.StatusBadGateway, err.Error())
		return
	}
	if !d.Allowed {
		p.httpRefused(c, host, d)
		return
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		up.Close()
		p.removeOutbound(up.LocalAddr())
		return
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		up.Close()
		p.removeOutbound(up.LocalAddr())
		return
	}
	buffered, _ := br.Peek(br.Buffered())
	p.splice(ctx, c, buffered, up)
}

// forward relays one absolute-form request and its response and reports
// whether the client connection may carry another request.
func (p *Proxy) forward(ctx context.Context, c net.Conn, req *http.Request) bool {
	u := req.URL
	if u.Host == "" || u.Scheme == "" {
		reason := fmt.Sprintf("%s %s is not a proxy request: send absolute-form (GET http://host/path) or CONNECT host:port",
			oneLine(req.Method), displayHost(req.RequestURI))
		p.refuse(Refusal{Protocol: ProtoHTTP, Reason: reason, Client: c.RemoteAddr().String()})
		p.httpReply(c, http.StatusBadRequest, reason)
		return false
	}
	if u.Scheme != "http" {
		reason := fmt.Sprintf("scheme %q is not forwarded: use CONNECT for %s", u.Scheme, u.Scheme)
		p.refuse(Refusal{Protocol: ProtoHTTP, Host: displayHost(u.Host), Reason: reason, Client: c.RemoteAddr().String()})
		p.httpReply(c, http.StatusBadRequest, reason)
		return false
	}
	host, port, err := splitAuthority(u.Host, 80)
	if err != nil {
		reason := fmt.Sprintf("bad authority %s: %v", displayHost(u.Host), err)
		p.refuse(Refusal{Protocol: ProtoHTTP, Host: displayHost(u.Host), Reason: reason, Client: c.RemoteAddr().String()})
		p.httpReply(c, http.StatusBadRequest, reason)
		return false
	}
	up, d, err := p.connect(ctx, ProtoHTTP, c, host, port)
	if err != nil {
		p.httpReply(c, http.StatusBadGateway, err.Error())
		return false
	}
	if !d.Allowed {
		p.httpRefused(c, host, d)
		return false
	}
	defer p.removeOutbound(up.LocalAddr())
	defer up.Close()
	defer context.AfterFunc(ctx, func() { up.Close() })()
	if err := c.SetDeadline(time.Time{}); err != nil {
		return false
	}

	// RFC 9112 3.2.2: a proxy replaces Host with the target's authority.
	// The authority is what was checked; the client's Host header never
	// is, and never reaches the origin.
	clientClose := req.Close
	u.User = nil
	req.Host = u.Host
	removeHopHeaders(req.Header)
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""} // keep Request.Write from adding Go's
	}
	// One upstream connection per request: it is checked on its own,
	// and ends with the response.
	req.Close = true
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		// The client waits for this before sending its body; answer it
		// ourselves once the target is known to be allowed.
		req.Header.Del("Expect")
		if _, err := io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			return false
		}
	}
	if err := req.Write(up); err != nil {
		p.httpReply(c, http.StatusBadGateway, fmt.Sprintf("sending the request to %s: %v", hostPort(d.Host, port), err))
		return false
	}
	ubr := bufio.NewReaderSize(up, maxResponseHead)
	var resp *http.Response
	for {
		// ReadResponse drops a Connection header that says close, and
		// with it the names of the other hop-by-hop headers it lists.
		hop := connectionTokens(ubr)
		resp, err = http.ReadResponse(ubr, req)
		if err != nil {
			p.httpReply(c, http.StatusBadGateway, fmt.Sprintf("reading the response of %s: %v", hostPort(d.Host, port), err))
			return false
		}
		for _, k := range hop {
			resp.Header.Del(k)
		}
		if resp.StatusCode < 100 || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		// An interim response (103 Early Hints...): pass it on to a
		// client that understands one, and read on.
		if req.ProtoAtLeast(1, 1) {
			removeHopHeaders(resp.Header)
			var b bytes.Buffer
			fmt.Fprintf(&b, "HTTP/1.1 %s\r\n", resp.Status)
			resp.Header.Write(&b)
			b.WriteString("\r\n")
			if _, err := c.Write(b.Bytes()); err != nil {
				return false
			}
		}
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// Upgrade was stripped from the request, so this is a broken
		// origin; a tunnel needs CONNECT.
		p.httpReply(c, http.StatusBadGateway, "the origin switched protocols: use CONNECT for upgraded connections")
		return false
	}
	removeHopHeaders(resp.Header)
	chunked := len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"
	framed := resp.ContentLength >= 0 || chunked || req.Method == http.MethodHead ||
		resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
	keep := !clientClose && req.ProtoAtLeast(1, 1) && framed
	if !req.ProtoAtLeast(1, 1) {
		// An HTTP/1.0 client knows no chunking: the body runs to EOF.
		resp.TransferEncoding = nil
	}
	resp.Close = !keep
	if err := resp.Write(c); err != nil {
		return false
	}
	return keep
}

// maxResponseHead is how much of a response head connectionTokens looks
// at; a longer head keeps the names its Connection header lists when it
// also says close.
const maxResponseHead = 64 << 10

// connectionTokens returns the header names that the Connection headers
// of the response head waiting in br list, without consuming anything.
func connectionTokens(br *bufio.Reader) []string {
	var head []byte
	for {
		b, _ := br.Peek(br.Buffered())
		if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
			head = b[:i+2]
			break
		}
		if i := bytes.Index(b, []byte("\n\n")); i >= 0 {
			head = b[:i+1]
			break
		}
		if len(b) >= maxResponseHead {
			return nil
		}
		if _, err := br.Peek(len(b) + 1); err != nil {
			return nil
		}
	}
	var names []string
	for line := range bytes.SplitSeq(head, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok || !strings.EqualFold(string(bytes.TrimSpace(k)), "Connection") {
			continue
		}
		for f := range strings.SplitSeq(string(v), ",") {
			if f = textproto.TrimString(f); f != "" && !strings.EqualFold(f, "close") {
				names = append(names, f)
			}
		}
	}
	return names
}

// hopHeaders are the hop-by-hop headers of RFC 9110 7.6.1, which a proxy
// never forwards; every Proxy-* header goes too.
var hopHeaders = []string{"Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopHeaders(h http.Header) {
	for _, v := range h.Values("Connection") {
		for f := range strings.SplitSeq(v, ",") {
			if f = textproto.TrimString(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
	for k := range h {
		if strings.HasPrefix(textproto.CanonicalMIMEHeaderKey(k), "Proxy-") {
			delete(h, k)
		}
	}
}

// httpRefused answers a refused request: 400 for a host that is not a
// valid host at all, 403 for one the policy does not allow.
func (p *Proxy) httpRefused(c net.Conn, host string, d Decision) {
	code := http.StatusForbidden
	var he *HostError
	if _, _, _, err := CanonicalHost(host); errors.As(err, &he) {
		code = http.StatusBadRequest
	}
	msg := "refused: " + d.Reason
	if d.Suggestion != "" {
		msg += " (allow with " + d.Suggestion + ")"
	}
	p.httpReply(c, code, msg)
}

// httpReply sends a final response with a one-line body and ends the
// connection.
func (p *Proxy) httpReply(c net.Conn, code int, msg string) {
	body := "agentrun proxy: " + oneLine(msg) + "\n"
	// The handshake deadline may be what brought us here.
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
	lingerClose(c)
}

// lingerClose half-closes c and drains what the client still sends for a
// moment, so that closing does not reset the connection (and destroy the
// reply) while the client is still writing its request.
func lingerClose(c net.Conn) {
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	if c.SetReadDeadline(time.Now().Add(time.Second)) != nil {
		return
	}
	io.CopyN(io.Discard, c, 256<<10)
}

// peekLine returns the first line of what the client has sent so far
// without consuming it, for naming the target of a malformed request.
func peekLine(br *bufio.Reader) string {
	b, _ := br.Peek(br.Buffered())
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	return strings.TrimSuffix(string(b), "\r")
}

// requestTarget returns the request-target of a request line.
func requestTarget(line string) string {
	f := strings.SplitN(line, " ", 3)
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

// oneLine escapes s so that it prints on one line.
func oneLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			q := strconv.Quote(s)
			return q[1 : len(q)-1]
		}
	}
	return s
}
