package netpolicy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// SOCKS5 constants (RFC 1928).
const (
	socksVersion = 5

	socksNoAuth       = 0x00
	socksNoAcceptable = 0xff

	socksConnect      = 1
	socksBind         = 2
	socksUDPAssociate = 3

	socksATypIPv4   = 1
	socksATypDomain = 3
	socksATypIPv6   = 4

	socksSucceeded        = 0x00
	socksGeneralFailure   = 0x01
	socksNotAllowed       = 0x02
	socksNetUnreachable   = 0x03
	socksHostUnreachable  = 0x04
	socksConnRefused      = 0x05
	socksTTLExpired       = 0x06
	socksCmdNotSupported  = 0x07
	socksATypNotSupported = 0x08

	socksReplySize = 10 // with an IPv4 bound address
)

// serveSOCKS5 serves a SOCKS5 client: no authentication, CONNECT only,
// names resolved by the proxy.
func (p *Proxy) serveSOCKS5(ctx context.Context, c net.Conn, br *bufio.Reader) {
	client := c.RemoteAddr().String()
	broken := func(what string, err error) {
		p.logf("broken SOCKS5 client", "client", client, "reading", what, "err", err)
	}
	var head [2]byte
	if _, err := io.ReadFull(br, head[:]); err != nil {
		broken("greeting", err)
		return
	}
	methods := make([]byte, head[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		broken("methods", err)
		return
	}
	noAuth := false
	for _, m := range methods {
		noAuth = noAuth || m == socksNoAuth
	}
	if !noAuth {
		c.Write([]byte{socksVersion, socksNoAcceptable})
		p.refuse(Refusal{Protocol: ProtoSOCKS5, Reason: "the client offers no method this proxy accepts (only no authentication)", Client: client})
		return
	}
	if _, err := c.Write([]byte{socksVersion, socksNoAuth}); err != nil {
		return
	}

	var req [4]byte // VER CMD RSV ATYP
	if _, err := io.ReadFull(br, req[:]); err != nil {
		broken("request", err)
		return
	}
	if req[0] != socksVersion {
		p.refuse(Refusal{Protocol: ProtoSOCKS5, Reason: fmt.Sprintf("request of SOCKS version %d", req[0]), Client: client})
		p.socksFail(c, socksGeneralFailure)
		return
	}
	var host string
	switch req[3] {
	case socksATypIPv4:
		var a [4]byte
		if _, err := io.ReadFull(br, a[:]); err != nil {
			broken("address", err)
			return
		}
		host = netip.AddrFrom4(a).String()
	case socksATypIPv6:
		var a [16]byte
		if _, err := io.ReadFull(br, a[:]); err != nil {
			broken("address", err)
			return
		}
		host = netip.AddrFrom16(a).String()
	case socksATypDomain:
		n, err := br.ReadByte()
		if err != nil {
			broken("name length", err)
			return
		}
		name := make([]byte, n)
		if _, err := io.ReadFull(br, name); err != nil {
			broken("name", err)
			return
		}
		// Taken as raw bytes: CanonicalHost refuses a NUL or any other
		// byte a host name cannot hold, so "evil.com\x00.allowed.test"
		// never reaches a suffix match.
		host = string(name)
	default:
		p.refuse(Refusal{Protocol: ProtoSOCKS5, Reason: fmt.Sprintf("address type %d is not supported", req[3]), Client: client})
		p.socksFail(c, socksATypNotSupported)
		return
	}
	var portb [2]byte
	if _, err := io.ReadFull(br, portb[:]); err != nil {
		broken("port", err)
		return
	}
	port := int(portb[0])<<8 | int(portb[1])

	if req[1] != socksConnect {
		cmd := fmt.Sprintf("command %d", req[1])
		switch req[1] {
		case socksBind:
			cmd = "BIND"
		case socksUDPAssociate:
			cmd = "UDP ASSOCIATE"
		}
		p.refuse(Refusal{Protocol: ProtoSOCKS5, Host: displayHost(host), Port: port,
			Reason: fmt.Sprintf("SOCKS5 %s is not supported: only CONNECT is", cmd), Client: client})
		p.socksFail(c, socksCmdNotSupported)
		return
	}

	up, d, err := p.connect(ctx, ProtoSOCKS5, c, host, port)
	if err != nil {
		p.socksFail(c, socksErrorCode(err))
		return
	}
	if !d.Allowed {
		p.socksFail(c, socksNotAllowed)
		return
	}
	// The bound address is not the upstream socket's: a host address is
	// none of the sandbox's business, and clients do not use it.
	if err := p.socksReply(c, socksSucceeded); err != nil {
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

// socksFail sends a failure reply and ends the connection without
// resetting it, so that the client reads the code.
func (p *Proxy) socksFail(c net.Conn, code byte) {
	if p.socksReply(c, code) == nil {
		lingerClose(c)
	}
}

// socksReply sends a reply with bound address 0.0.0.0:0.
func (p *Proxy) socksReply(c net.Conn, code byte) error {
	var b [socksReplySize]byte
	b[0], b[1], b[3] = socksVersion, code, socksATypIPv4
	_, err := c.Write(b[:])
	return err
}

// socksErrorCode maps a lookup or connect failure to a reply code.
func socksErrorCode(err error) byte {
	var ne net.Error
	switch {
	case errors.Is(err, errLookup):
		return socksHostUnreachable
	case errors.Is(err, syscall.ECONNREFUSED):
		return socksConnRefused
	case errors.Is(err, syscall.ENETUNREACH):
		return socksNetUnreachable
	case errors.Is(err, syscall.EHOSTUNREACH):
		return socksHostUnreachable
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		// RFC 1928 has no timeout code; TTL expired is what clients
		// (curl among them) report as a timeout.
		return socksTTLExpired
	}
	return socksGeneralFailure
}
