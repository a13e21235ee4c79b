package netpolicy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// defaultPorts are the ports an entry without a port allows.
var defaultPorts = []int{80, 443}

// Policy is a parsed allow list. The zero value and a nil *Policy allow
// nothing. A Policy is immutable and safe for concurrent use.
//
// Names and addresses are matched separately, and a request by name never
// matches an IP entry: the proxy resolves only names the list names, so it
// cannot be used to look up (and leak data through) arbitrary names. IP
// and CIDR entries serve two purposes: they allow requests for IP literals
// in their range, and they are the only way to lift the SSRF guard for a
// special address (see Classify), whether asked for as a literal or
// reached by resolving an allowed name.
//
// A special address is lifted only by an entry that lies inside the
// special range the address belongs to: 10.0.0.0/8 lifts 10.0.0.5, but
// 0.0.0.0/0 (which allows every public IPv4 literal) lifts none, and
// 169.254.0.0/16 does not lift the metadata address 169.254.169.254,
// which only an entry naming exactly it lifts.
type Policy struct {
	exact    map[string][]int // name -> ports
	wildcard map[string][]int // "example.com" for *.example.com -> ports
	nets     []netRule
	entries  []string
}

type netRule struct {
	prefix netip.Prefix
	ports  []int
}

// Decision is the verdict on one destination.
type Decision struct {
	// Allowed says whether the proxy may connect.
	Allowed bool
	// Host is the canonical host (see CanonicalHost), or the host as
	// given when it is not valid; Port is the port asked for.
	Host string
	Port int
	// Addr is the address to connect to; Addrs holds every checked
	// address in resolver order, Addr first, for a caller that falls
	// back when one is unreachable. A caller must connect to one of
	// these exactly and never resolve Host again.
	Addr  netip.Addr
	Addrs []netip.Addr
	// Reason says in one line why a destination is refused.
	Reason string
	// Suggestion, when set, is the flag that would allow the refused
	// destination: "--allow-net HOST:PORT".
	Suggestion string
}

// Resolver looks up the addresses of a host name. NetResolver adapts a
// *net.Resolver.
type Resolver interface {
	LookupNetIP(ctx context.Context, host string) ([]netip.Addr, error)
}

// NetResolver returns r (net.DefaultResolver when nil) as a Resolver that
// asks for both IPv4 and IPv6 addresses.
func NetResolver(r *net.Resolver) Resolver {
	if r == nil {
		r = net.DefaultResolver
	}
	return netResolver{r}
}

type netResolver struct{ r *net.Resolver }

func (n netResolver) LookupNetIP(ctx context.Context, host string) ([]netip.Addr, error) {
	return n.r.LookupNetIP(ctx, "ip", host)
}

// ParseAllow parses allow entries, as given to --allow-net or in a
// policy's allow_net. Each entry is one or more comma-separated items:
//
//	example.com          the name itself, ports 80 and 443
//	*.example.com:8443   any name below example.com (not example.com), port 8443
//	192.0.2.7:22         an IPv4 literal (any inet_aton spelling)
//	10.0.0.0/8:5432      an IPv4 range
//	[2001:db8::1]:443    an IPv6 literal
//	[fd00::/8]:443       an IPv6 range
//	fd00::/8             an IPv6 literal or range without port, unbracketed
//
// A bad item is an error naming the item and why.
func ParseAllow(entries []string) (*Policy, error) {
	p := &Policy{exact: map[string][]int{}, wildcard: map[string][]int{}}
	for _, entry := range entries {
		for item := range strings.SplitSeq(entry, ",") {
			item = strings.TrimSpace(item)
			canon, err := p.add(item)
			if err != nil {
				return nil, fmt.Errorf("allow entry %q: %w", item, err)
			}
			p.entries = append(p.entries, canon)
		}
	}
	return p, nil
}

// add parses one item into p and returns its canonical text.
func (p *Policy) add(item string) (string, error) {
	if item == "" {
		return "", fmt.Errorf("empty entry")
	}
	if strings.Contains(item, "://") {
		return "", fmt.Errorf("give HOST[:PORT], not a URL")
	}
	host, ports, portText, err := splitEntry(item)
	if err != nil {
		return "", err
	}
	if strings.Contains(host, "/") {
		pfx, err := parsePrefix(host)
		if err != nil {
			return "", err
		}
		p.nets = append(p.nets, netRule{pfx, ports})
		return entryText(pfx.String(), pfx.Addr().Is6(), portText), nil
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		if strings.Contains(rest, "*") {
			return "", fmt.Errorf("'*' is accepted only as the whole first label, as in *.example.com")
		}
		name, _, isIP, err := CanonicalHost(rest)
		if err != nil {
			return "", err
		}
		if isIP {
			return "", fmt.Errorf("a wildcard needs a domain name, not an IP address (use a CIDR range)")
		}
		p.wildcard[name] = mergePorts(p.wildcard[name], ports)
		return entryText("*."+name, false, portText), nil
	}
	if host == "*" {
		return "", fmt.Errorf("'*' alone is not accepted: name the hosts (a wildcard is *.DOMAIN)")
	}
	if strings.Contains(host, "*") {
		return "", fmt.Errorf("'*' is accepted only as the whole first label, as in *.example.com")
	}
	name, ip, isIP, err := CanonicalHost(host)
	if err != nil {
		return "", err
	}
	if isIP {
		pfx := netip.PrefixFrom(ip, ip.BitLen())
		p.nets = append(p.nets, netRule{pfx, ports})
		return entryText(name, ip.Is6(), portText), nil
	}
	p.exact[name] = mergePorts(p.exact[name], ports)
	return entryText(name, false, portText), nil
}

func entryText(host string, v6 bool, port string) string {
	if port == "" {
		return host
	}
	if v6 {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

// splitEntry splits an item into its host part and ports; portText is
// the canonical port, "" when the item had none.
func splitEntry(item string) (host string, ports []int, portText string, err error) {
	portStr, hasPort := "", false
	switch {
	case item[0] == '[':
		end := strings.IndexByte(item, ']')
		if end < 0 {
			return "", nil, "", fmt.Errorf("missing ']'")
		}
		host = item[1:end]
		if !strings.Contains(host, ":") {
			return "", nil, "", fmt.Errorf("brackets hold only IPv6 addresses and ranges")
		}
		switch rest := item[end+1:]; {
		case rest == "":
		case rest[0] == ':':
			portStr, hasPort = rest[1:], true
		default:
			return "", nil, "", fmt.Errorf("unexpected %q after ']'", rest)
		}
	case strings.Count(item, ":") == 1:
		host, portStr, _ = strings.Cut(item, ":")
		hasPort = true
	default:
		// No colon, or several: a bare IPv6 address or range, which
		// cannot carry a port without brackets.
		host = item
	}
	if host == "" {
		return "", nil, "", fmt.Errorf("empty host")
	}
	if !hasPort {
		return host, defaultPorts, "", nil
	}
	port, err := parsePort(portStr)
	if err != nil {
		return "", nil, "", err
	}
	return host, []int{port}, strconv.Itoa(port), nil
}

// parsePrefix parses ADDR/BITS, ADDR in any spelling CanonicalHost
// accepts; an IPv4-mapped IPv6 range becomes the IPv4 range it maps.
func parsePrefix(s string) (netip.Prefix, error) {
	addrText, bitsText, _ := strings.Cut(s, "/")
	var ip netip.Addr
	maxBits, mapped := 32, false
	if strings.Contains(addrText, ":") {
		a, err := netip.ParseAddr(addrText)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q is not an IPv6 address", addrText)
		}
		ip, maxBits, mapped = a, 128, a.Is4In6()
	} else {
		_, a, isIP, err := CanonicalHost(addrText)
		if err != nil {
			return netip.Prefix{}, err
		}
		if !isIP {
			return netip.Prefix{}, fmt.Errorf("a range needs an IP address, not a name (give HOST[:PORT], not a URL)")
		}
		ip = a
	}
	bits, err := strconv.Atoi(bitsText)
	if err != nil || bitsText == "" || bitsText[0] < '0' || bitsText[0] > '9' {
		return netip.Prefix{}, fmt.Errorf("prefix length %q is not a number", bitsText)
	}
	if bits > maxBits {
		return netip.Prefix{}, fmt.Errorf("prefix length %d is longer than %d", bits, maxBits)
	}
	if mapped {
		if bits < 96 {
			return netip.Prefix{}, fmt.Errorf("an IPv4-mapped range needs a prefix length of at least 96")
		}
		ip, bits = ip.Unmap(), bits-96
	}
	pfx := netip.PrefixFrom(ip, bits)
	if m := pfx.Masked(); m != pfx {
		return netip.Prefix{}, fmt.Errorf("host bits are set (did you mean %s?)", m)
	}
	return pfx, nil
}

func mergePorts(a, b []int) []int {
	out := slices.Clone(a)
	for _, p := range b {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// String returns the canonical entries, comma-separated: ParseAllow of it
// gives the same policy.
func (p *Policy) String() string {
	if p == nil {
		return ""
	}
	return strings.Join(p.entries, ",")
}

// Entries returns the canonical entries, one per item.
func (p *Policy) Entries() []string {
	if p == nil {
		return nil
	}
	return slices.Clone(p.entries)
}

// namePorts returns the ports any name entry allows for a canonical name,
// nil when none matches it.
func (p *Policy) namePorts(name string) []int {
	if p == nil {
		return nil
	}
	ports := p.exact[name]
	// *.example.com matches a.example.com and a.b.example.com: try
	// every proper suffix that starts after a dot.
	for i := 0; i < len(name); i++ {
		if name[i] == '.' {
			if w, ok := p.wildcard[name[i+1:]]; ok {
				ports = mergePorts(ports, w)
			}
		}
	}
	return ports
}

// AllowsName reports whether any name entry matches host, on any port.
// It is what a DNS stub that answers only allowed names asks.
func (p *Policy) AllowsName(host string) bool {
	name, _, isIP, err := CanonicalHost(host)
	return err == nil && !isIP && len(p.namePorts(name)) > 0
}

// coveredByNet reports whether an IP entry allows ip on port. A special
// address (class range block) needs an entry lying inside block.
func (p *Policy) coveredByNet(ip netip.Addr, port int, special bool, block netip.Prefix) bool {
	if p == nil {
		return false
	}
	for _, r := range p.nets {
		if !r.prefix.Contains(ip) || !slices.Contains(r.ports, port) {
			continue
		}
		if !special || r.prefix.Bits() >= block.Bits() && block.Contains(r.prefix.Addr()) {
			return true
		}
	}
	return false
}

func suggestion(entries ...string) string {
	return "--allow-net " + strings.Join(entries, ",")
}

// Decide judges a connection to host:port. host is as the client sent it
// (CanonicalHost is applied); resolved holds the addresses a name
// resolved to, and is not looked at for an IP literal or a name the list
// does not allow.
//
// Every resolved address must pass: if any is special and not lifted by
// an IP entry, the name is refused even when others are fine. Picking a
// fine address instead would be safe for this one connection, but the
// owner of a name controls its answers, so a name that resolves to a
// special address at all is either a rebinding attack or a
// misconfiguration worth seeing, and a refusal is easier to explain than
// a connection that works or not depending on answer order.
func (p *Policy) Decide(host string, port int, resolved []netip.Addr) Decision {
	d, needAddrs := p.prejudge(host, port)
	if !needAddrs {
		return d
	}
	return p.judgeAddrs(d, resolved)
}

// Check is Decide with the lookup done: it canonicalises host, refuses
// what the list does not allow before any lookup (so that no name outside
// the list is ever resolved), resolves an allowed name with r and decides
// on the answer. A failed lookup is not a refusal: Check then returns an
// error, with a Decision that is not Allowed and says why.
func (p *Policy) Check(ctx context.Context, r Resolver, host string, port int) (Decision, error) {
	d, needAddrs := p.prejudge(host, port)
	if !needAddrs {
		return d, nil
	}
	addrs, err := r.LookupNetIP(ctx, d.Host)
	if err != nil {
		d.Reason = fmt.Sprintf("looking up %s: %v", d.Host, err)
		return d, fmt.Errorf("netpolicy: looking up %s: %w", d.Host, err)
	}
	return p.judgeAddrs(d, addrs), nil
}

// prejudge decides everything that needs no lookup. needAddrs says that
// host is a name the list allows on port, and the verdict depends on
// its addresses.
func (p *Policy) prejudge(host string, port int) (d Decision, needAddrs bool) {
	d = Decision{Host: host, Port: port}
	if port < 1 || port > 65535 {
		d.Reason = fmt.Sprintf("port %d is out of range (1-65535)", port)
		return d, false
	}
	name, ip, isIP, err := CanonicalHost(host)
	if err != nil {
		d.Reason = err.Error()
		return d, false
	}
	d.Host = name
	target := hostPort(name, port)
	if isIP {
		class, block, special := classify(ip)
		if !p.coveredByNet(ip, port, special, block) {
			d.Reason = target + " is not in the allow list"
			if special {
				d.Reason += fmt.Sprintf(" (%s is %s)", name, describe(class))
			}
			d.Suggestion = suggestion(target)
			return d, false
		}
		d.Allowed, d.Addr, d.Addrs = true, ip, []netip.Addr{ip}
		return d, false
	}
	ports := p.namePorts(name)
	if len(ports) == 0 {
		d.Reason = target + " is not in the allow list"
		d.Suggestion = suggestion(target)
		return d, false
	}
	if !slices.Contains(ports, port) {
		d.Reason = fmt.Sprintf("%s is allowed only on port %s, not %d", name, joinInts(ports), port)
		d.Suggestion = suggestion(target)
		return d, false
	}
	return d, true
}

// judgeAddrs finishes the decision on an allowed name from its addresses.
func (p *Policy) judgeAddrs(d Decision, resolved []netip.Addr) Decision {
	if len(resolved) == 0 {
		d.Reason = d.Host + " has no addresses"
		return d
	}
	var ok, refused []netip.Addr
	var firstClass string
	for _, a := range resolved {
		a = a.Unmap()
		class, block, special := classify(a)
		// A zoned address never matches a prefix, so it cannot be lifted.
		if special && !p.coveredByNet(a, d.Port, special, block) {
			if len(refused) == 0 {
				firstClass = class
			}
			if !slices.Contains(refused, a) {
				refused = append(refused, a)
			}
			continue
		}
		if !slices.Contains(ok, a) {
			ok = append(ok, a)
		}
	}
	if len(refused) > 0 {
		d.Reason = fmt.Sprintf("%s resolves to %s %s", d.Host, describe(firstClass), refused[0])
		if len(resolved) > 1 {
			d.Reason += fmt.Sprintf(" (one of %d addresses; any special address refuses the name)", len(resolved))
		}
		var sugg []string
		for _, a := range refused {
			if a.IsValid() && a.Zone() == "" {
				sugg = append(sugg, hostPort(a.String(), d.Port))
			}
		}
		if len(sugg) > 0 {
			d.Suggestion = suggestion(sugg...)
		}
		return d
	}
	d.Allowed, d.Addr, d.Addrs = true, ok[0], ok
	return d
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}
