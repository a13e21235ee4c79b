package netpolicy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// HostError reports a host that is neither a valid host name nor an IP
// address literal. Host is the input as given; print it with %q, since it
// may hold any byte.
type HostError struct {
	Host   string
	Reason string
}

func (e *HostError) Error() string {
	return fmt.Sprintf("invalid host %q: %s", e.Host, e.Reason)
}

// maxHostInput bounds what CanonicalHost looks at: a name is at most 253
// bytes, plus a trailing dot and brackets for a literal.
const maxHostInput = 256

// CanonicalHost turns a host as a client sent it into the one form every
// decision uses.
//
// A name comes back lower-cased without its trailing dot, after checking
// each label (1-63 bytes of a-z, 0-9, '-' and '_', not starting or ending
// with '-'; 253 bytes in all). Non-ASCII names are refused rather than
// converted: IDNA mapping is a second parser whose disagreements with the
// client's are exactly what an attacker looks for, and every client sends
// the punycode form anyway.
//
// An IP literal comes back as ip, with host its canonical text and isIP
// set. IPv4 is parsed the way inet_aton(3) parses it, since that is what a
// C client in the sandbox would connect to: one to four parts, each
// decimal, octal (leading 0) or hex (leading 0x), the last part filling
// the remaining bytes (2130706433, 0x7f.1, 0177.0.0.1, 127.1 all mean
// 127.0.0.1). IPv6 may be bracketed; zones are refused; an IPv4-mapped
// address (::ffff:127.0.0.1) is unmapped to IPv4, so that no decision
// ever sees the two spellings as different hosts.
//
// Following the WHATWG URL rules, a host whose last label is a number
// (all digits, or 0x and hex digits) must be a valid IPv4 literal: such a
// name is refused and never passed to DNS, where a resolver might read it
// differently.
//
// Any byte other than letters, digits, '-', '.', '_', and ':' or brackets
// for IPv6 is refused with a *HostError, NUL included: a name that
// carries one is never valid, and refusing it here keeps it out of every
// suffix match and every log line.
func CanonicalHost(s string) (host string, ip netip.Addr, isIP bool, err error) {
	bad := func(format string, args ...any) (string, netip.Addr, bool, error) {
		return "", netip.Addr{}, false, &HostError{Host: s, Reason: fmt.Sprintf(format, args...)}
	}
	if s == "" {
		return bad("empty host")
	}
	if len(s) > maxHostInput {
		return bad("longer than 253 bytes")
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '-', c == '.', c == '_', c == ':', c == '[', c == ']':
		case c >= 0x80:
			return bad("non-ASCII host: give its punycode (xn--) form")
		case c == '%':
			return bad("'%%' at offset %d: IPv6 zones and percent-encoding are not accepted", i)
		default:
			return bad("byte %s at offset %d is not allowed in a host name", quoteByte(c), i)
		}
	}
	if s[0] == '[' {
		if s[len(s)-1] != ']' || strings.Count(s, "[") != 1 || strings.Count(s, "]") != 1 {
			return bad("unbalanced brackets")
		}
		inner := s[1 : len(s)-1]
		if !strings.Contains(inner, ":") {
			return bad("brackets hold only IPv6 addresses")
		}
		a, err := parseIPv6(inner)
		if err != "" {
			return bad("%s", err)
		}
		return a.String(), a, true, nil
	}
	if strings.ContainsAny(s, "[]") {
		return bad("brackets hold only IPv6 addresses, as in [::1]")
	}
	if strings.Contains(s, ":") {
		a, err := parseIPv6(s)
		if err != "" {
			return bad("%s", err)
		}
		return a.String(), a, true, nil
	}
	name := strings.ToLower(strings.TrimSuffix(s, "."))
	if endsInNumber(name) {
		a, ok := parseIPv4(name)
		if !ok {
			return bad("ends in a number but is not a valid IPv4 address")
		}
		return a.String(), a, true, nil
	}
	if reason := checkName(name); reason != "" {
		return bad("%s", reason)
	}
	return name, netip.Addr{}, false, nil
}

func quoteByte(c byte) string {
	return strconv.QuoteRune(rune(c))
}

// parseIPv6 parses an IPv6 literal without zone, unmapping an
// IPv4-mapped address. It returns a reason on failure.
func parseIPv6(s string) (netip.Addr, string) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() {
		return netip.Addr{}, "not a valid IPv6 address"
	}
	if a.Zone() != "" {
		return netip.Addr{}, "IPv6 zones are not accepted"
	}
	return a.Unmap(), ""
}

// endsInNumber reports whether the last label of name is a number in the
// sense of the WHATWG URL standard: decimal digits, or 0x followed by hex
// digits (possibly none).
func endsInNumber(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if last == "" {
		return false
	}
	if len(last) >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') {
		for i := 2; i < len(last); i++ {
			if !isHex(last[i]) {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// parseIPv4 parses s as inet_aton(3) does, except that a value that
// overflows its part is an error rather than wrapping.
func parseIPv4(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var vals [4]uint64
	for i, p := range parts {
		v, ok := parseIPv4Part(p)
		if !ok {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	n := len(parts)
	var x uint64
	for i := 0; i < n-1; i++ {
		if vals[i] > 0xff {
			return netip.Addr{}, false
		}
		x |= vals[i] << (24 - 8*i)
	}
	if vals[n-1] >= 1<<(8*(5-n)) {
		return netip.Addr{}, false
	}
	x |= vals[n-1]
	return netip.AddrFrom4([4]byte{byte(x >> 24), byte(x >> 16), byte(x >> 8), byte(x)}), true
}

// parseIPv4Part parses one part of an inet_aton address: 0x/0X hex
// (inet_aton takes "0x" alone as 0), leading-0 octal, or decimal.
func parseIPv4Part(p string) (uint64, bool) {
	if p == "" || p[0] < '0' || p[0] > '9' {
		return 0, false
	}
	base := uint64(10)
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		base, p = 16, p[2:]
	case len(p) >= 2 && p[0] == '0':
		base, p = 8, p[1:]
	}
	var v uint64
	for i := 0; i < len(p); i++ {
		c := p[i]
		var d uint64
		switch {
		case '0' <= c && c <= '9':
			d = uint64(c - '0')
		case 'a' <= c && c <= 'f':
			d = uint64(c-'a') + 10
		case 'A' <= c && c <= 'F':
			d = uint64(c-'A') + 10
		default:
			return 0, false
		}
		if d >= base {
			return 0, false
		}
		v = v*base + d
		if v > 0xffffffff {
			return 0, false
		}
	}
	return v, true
}

// checkName validates a lower-cased name without trailing dot and returns
// why it is not a valid host name, or "".
//
// '_' is accepted: it is not valid in RFC 1123 host names, but real DNS
// names carry it (SRV-style labels, some cloud and CDN host names), Go's
// resolver and curl accept it, and no URL or authority grammar gives it a
// meaning, so it opens no parsing ambiguity.
func checkName(name string) string {
	if name == "" {
		return "empty name"
	}
	if len(name) > 253 {
		return "longer than 253 bytes"
	}
	for label := range strings.SplitSeq(name, ".") {
		switch {
		case label == "":
			return "empty label"
		case len(label) > 63:
			return fmt.Sprintf("label %q is longer than 63 bytes", label)
		case label[0] == '-' || label[len(label)-1] == '-':
			return fmt.Sprintf("label %q starts or ends with '-'", label)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return fmt.Sprintf("byte %s is not allowed in a host name", quoteByte(c))
			}
		}
	}
	return ""
}

// displayHost returns s as it can be shown on one line: unchanged when it
// is printable ASCII, quoted otherwise.
func displayHost(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e || s[i] == '"' || s[i] == '\\' {
			return strconv.Quote(s)
		}
	}
	return s
}

// hostPort joins a canonical host and a port, bracketing IPv6.
func hostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(port)
	}
	return host + ":" + strconv.Itoa(port)
}

// parsePort parses a decimal port, 1-65535, digits only (strconv.Atoi
// would take a sign).
func parsePort(s string) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("empty port")
	}
	if len(s) > 5 {
		return 0, fmt.Errorf("port %q is out of range (1-65535)", s)
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("port %q is not a decimal number", s)
		}
		n = n*10 + int(s[i]-'0')
	}
	if n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %d is out of range (1-65535)", n)
	}
	return n, nil
}

// splitAuthority splits host[:port] or [v6][:port] as found in a CONNECT
// target or an absolute URL. A missing or empty port is defPort; defPort
// 0 makes the port required. The host is returned as sent (brackets kept)
// for CanonicalHost to judge.
func splitAuthority(a string, defPort int) (string, int, error) {
	if a == "" {
		return "", 0, fmt.Errorf("empty authority")
	}
	host, portStr, hasPort := a, "", false
	if a[0] == '[' {
		end := strings.IndexByte(a, ']')
		if end < 0 {
			return "", 0, fmt.Errorf("missing ']'")
		}
		host = a[:end+1]
		switch rest := a[end+1:]; {
		case rest == "":
		case rest[0] == ':':
			portStr, hasPort = rest[1:], true
		default:
			return "", 0, fmt.Errorf("unexpected text after ']'")
		}
	} else if i := strings.LastIndexByte(a, ':'); i >= 0 {
		if strings.IndexByte(a, ':') != i {
			return "", 0, fmt.Errorf("an IPv6 address must be in brackets")
		}
		host, portStr, hasPort = a[:i], a[i+1:], true
	}
	if !hasPort || portStr == "" {
		if defPort == 0 {
			return "", 0, fmt.Errorf("missing port")
		}
		return host, defPort, nil
	}
	port, err := parsePort(portStr)
	if err != nil {
		return "", 0, err
	}
	return host, port, nil
}
