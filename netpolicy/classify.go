package netpolicy

import (
	"net/netip"
	"strings"
)

// Address classes that Classify returns. ClassPublic is the only one that
// is not special.
const (
	ClassPublic         = "public"
	ClassInvalid        = "invalid"
	ClassLoopback       = "loopback"
	ClassPrivate        = "private"
	ClassLinkLocal      = "link-local"
	ClassCGNAT          = "cgnat"
	ClassUniqueLocal    = "unique-local"
	ClassSiteLocal      = "site-local"
	ClassMulticast      = "multicast"
	ClassUnspecified    = "unspecified"
	ClassBenchmark      = "benchmark"
	ClassBroadcast      = "broadcast"
	ClassDocumentation  = "documentation"
	ClassReserved       = "reserved"
	ClassIETFProtocol   = "ietf-protocol"
	ClassMetadata       = "metadata"
	ClassIPv4Compatible = "ipv4-compatible"
	ClassDiscard        = "discard"
	ClassNAT64Local     = "nat64-local"
)

// Prefixes of IPv6 translation mechanisms whose addresses embed an IPv4
// address; Classify gives such an address the class of the embedded one,
// prefixed with one of these and a colon (for example "nat64:loopback").
const (
	EmbedNAT64  = "nat64"
	Embed6to4   = "6to4"
	EmbedTeredo = "teredo"
)

type classRange struct {
	prefix netip.Prefix
	class  string
}

func mustRanges(pairs ...string) []classRange {
	r := make([]classRange, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		r = append(r, classRange{netip.MustParsePrefix(pairs[i]), pairs[i+1]})
	}
	return r
}

// The tables below are read-only after initialisation. Order matters:
// the first range that contains an address decides, so narrower ranges
// come before the wider ones that contain them.
var (
	// metadataRanges are the cloud instance metadata and credential
	// endpoints, checked before the generic ranges so that they get their
	// own class and can be allowed only by an entry naming them exactly.
	metadataRanges = mustRanges(
		"169.254.169.254/32", ClassMetadata, // AWS, GCP, Azure, OpenStack, DigitalOcean...
		"169.254.170.2/32", ClassMetadata, // AWS ECS task credentials
		"169.254.170.23/32", ClassMetadata, // AWS EKS Pod Identity agent
		"100.100.100.200/32", ClassMetadata, // Alibaba Cloud
		"168.63.129.16/32", ClassMetadata, // Azure WireServer: a public address only meaningful inside Azure
		"fd00:ec2::254/128", ClassMetadata, // AWS IMDS over IPv6
		"fd00:ec2::23/128", ClassMetadata, // AWS EKS Pod Identity agent over IPv6
	)
	v4Ranges = mustRanges(
		"255.255.255.255/32", ClassBroadcast,
		"0.0.0.0/8", ClassUnspecified,
		"10.0.0.0/8", ClassPrivate,
		"100.64.0.0/10", ClassCGNAT,
		"127.0.0.0/8", ClassLoopback,
		"169.254.0.0/16", ClassLinkLocal,
		"172.16.0.0/12", ClassPrivate,
		"192.0.0.0/24", ClassIETFProtocol,
		"192.0.2.0/24", ClassDocumentation,
		"192.88.99.0/24", ClassReserved, // deprecated 6to4 relay anycast
		"192.168.0.0/16", ClassPrivate,
		"198.18.0.0/15", ClassBenchmark,
		"198.51.100.0/24", ClassDocumentation,
		"203.0.113.0/24", ClassDocumentation,
		"224.0.0.0/4", ClassMulticast,
		"240.0.0.0/4", ClassReserved,
	)
	v6Ranges = mustRanges(
		"::/128", ClassUnspecified,
		"::1/128", ClassLoopback,
		"::/96", ClassIPv4Compatible, // deprecated (RFC 4291); never routed to IPv4 by Linux
		"64:ff9b:1::/48", ClassNAT64Local, // local-use NAT64 (RFC 8215): maps into the site's own space
		"100::/64", ClassDiscard,
		"2001:2::/48", ClassBenchmark,
		"2001::/23", ClassIETFProtocol,
		"2001:db8::/32", ClassDocumentation,
		"3fff::/20", ClassDocumentation, // RFC 9637
		"5f00::/16", ClassReserved, // SRv6 SIDs
		"fc00::/7", ClassUniqueLocal,
		"fe80::/10", ClassLinkLocal,
		"fec0::/10", ClassSiteLocal, // deprecated, still private in practice
		"ff00::/8", ClassMulticast,
	)
	globalUnicast = netip.MustParsePrefix("2000::/3")
	nat64Prefix   = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour     = netip.MustParsePrefix("2002::/16")
	teredoPrefix  = netip.MustParsePrefix("2001::/32")
)

// Classify says what kind of address ip is, and whether it is special:
// any address a sandbox must not reach unless an allow entry names it or
// its range explicitly. Public addresses are the only ones that are not
// special; an invalid address is special.
//
// An IPv4-mapped IPv6 address is classified as the IPv4 address it maps.
// NAT64 (64:ff9b::/96), 6to4 (2002::/16) and Teredo (2001::/32) addresses
// are classified by the IPv4 address they embed (for Teredo, the client's
// and the server's, the first special one winning), since a gateway turns
// them into a connection to that address: the class is then prefixed with
// the mechanism, as in "nat64:loopback", and an embedded public address
// makes the whole address public. IPv6 outside 2000::/3 that no other
// range covers is reserved.
func Classify(ip netip.Addr) (class string, special bool) {
	class, _, special = classify(ip)
	return class, special
}

// classify is Classify that also returns the range the class comes from,
// which bounds the allow entries that may lift it (see Policy).
func classify(ip netip.Addr) (string, netip.Prefix, bool) {
	if !ip.IsValid() {
		return ClassInvalid, netip.Prefix{}, true
	}
	ip = ip.WithZone("").Unmap()
	for _, r := range metadataRanges {
		if r.prefix.Contains(ip) {
			return r.class, r.prefix, true
		}
	}
	if ip.Is4() {
		for _, r := range v4Ranges {
			if r.prefix.Contains(ip) {
				return r.class, r.prefix, true
			}
		}
		return ClassPublic, netip.Prefix{}, false
	}
	b := ip.As16()
	switch {
	case nat64Prefix.Contains(ip):
		return embedded(EmbedNAT64, ip, 96, netip.AddrFrom4([4]byte(b[12:16])))
	case sixToFour.Contains(ip):
		return embedded(Embed6to4, ip, 16, netip.AddrFrom4([4]byte(b[2:6])))
	case teredoPrefix.Contains(ip):
		server := netip.AddrFrom4([4]byte(b[4:8]))
		client := netip.AddrFrom4([4]byte{b[12] ^ 0xff, b[13] ^ 0xff, b[14] ^ 0xff, b[15] ^ 0xff})
		for _, inner := range []netip.Addr{server, client} {
			if c, _, special := classify(inner); special {
				// The two embedded addresses are not one contiguous
				// range: only an entry naming this exact address lifts it.
				return EmbedTeredo + ":" + c, netip.PrefixFrom(ip, 128), true
			}
		}
		return ClassPublic, netip.Prefix{}, false
	}
	for _, r := range v6Ranges {
		if r.prefix.Contains(ip) {
			return r.class, r.prefix, true
		}
	}
	if !globalUnicast.Contains(ip) {
		p, _ := ip.Prefix(3)
		return ClassReserved, p, true
	}
	return ClassPublic, netip.Prefix{}, false
}

// embedded classifies an IPv6 address by the IPv4 address it carries at
// bit offset off; the block it returns is the IPv6 image of the IPv4 one.
func embedded(mech string, ip netip.Addr, off int, inner netip.Addr) (string, netip.Prefix, bool) {
	c, block, special := classify(inner)
	if !special {
		return ClassPublic, netip.Prefix{}, false
	}
	p, _ := ip.Prefix(off + block.Bits())
	return mech + ":" + c, p, true
}

// describe turns a class into words for a refusal: "a private address".
func describe(class string) string {
	if mech, inner, ok := strings.Cut(class, ":"); ok {
		names := map[string]string{EmbedNAT64: "NAT64", Embed6to4: "6to4", EmbedTeredo: "Teredo"}
		return "a " + names[mech] + " address embedding " + describe(inner)
	}
	switch class {
	case ClassPublic:
		return "a public address"
	case ClassInvalid:
		return "an invalid address"
	case ClassUnspecified:
		return "an unspecified address"
	case ClassIETFProtocol:
		return "an IETF protocol assignment address"
	case ClassCGNAT:
		return "a carrier-grade NAT address"
	case ClassBroadcast:
		return "the broadcast address"
	case ClassBenchmark:
		return "a benchmarking address"
	case ClassUniqueLocal:
		return "a unique local address"
	case ClassMetadata:
		return "a cloud metadata address"
	case ClassIPv4Compatible:
		return "a deprecated IPv4-compatible IPv6 address"
	case ClassNAT64Local:
		return "a local-use NAT64 address"
	}
	return "a " + class + " address"
}
