package netpolicy

import (
	"net/netip"
	"testing"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		ip    string
		class string
	}{
		{"127.0.0.1", ClassLoopback},
		{"127.255.255.254", ClassLoopback},
		{"::1", ClassLoopback},
		{"::ffff:127.0.0.1", ClassLoopback},
		{"10.0.0.5", ClassPrivate},
		{"172.16.0.1", ClassPrivate},
		{"172.31.255.255", ClassPrivate},
		{"192.168.1.1", ClassPrivate},
		{"169.254.1.1", ClassLinkLocal},
		{"fe80::1", ClassLinkLocal},
		{"100.64.0.1", ClassCGNAT},
		{"100.127.255.255", ClassCGNAT},
		{"fc00::1", ClassUniqueLocal},
		{"fd12:3456::1", ClassUniqueLocal},
		{"fec0::1", ClassSiteLocal},
		{"224.0.0.1", ClassMulticast},
		{"239.255.255.250", ClassMulticast},
		{"ff02::1", ClassMulticast},
		{"0.0.0.0", ClassUnspecified},
		{"0.1.2.3", ClassUnspecified},
		{"::", ClassUnspecified},
		{"198.18.0.1", ClassBenchmark},
		{"198.19.255.255", ClassBenchmark},
		{"2001:2::1", ClassBenchmark},
		{"255.255.255.255", ClassBroadcast},
		{"192.0.2.1", ClassDocumentation},
		{"198.51.100.1", ClassDocumentation},
		{"203.0.113.1", ClassDocumentation},
		{"2001:db8::1", ClassDocumentation},
		{"3fff::1", ClassDocumentation},
		{"240.0.0.1", ClassReserved},
		{"192.88.99.1", ClassReserved},
		{"4000::1", ClassReserved},
		{"5f00::1", ClassReserved},
		{"192.0.0.1", ClassIETFProtocol},
		{"192.0.0.192", ClassIETFProtocol},
		{"2001:1::1", ClassIETFProtocol},
		{"169.254.169.254", ClassMetadata},
		{"::ffff:169.254.169.254", ClassMetadata},
		{"169.254.170.2", ClassMetadata},
		{"169.254.170.23", ClassMetadata},
		{"100.100.100.200", ClassMetadata},
		{"168.63.129.16", ClassMetadata},
		{"fd00:ec2::254", ClassMetadata},
		{"fd00:ec2::23", ClassMetadata},
		{"::7f00:1", ClassIPv4Compatible},
		{"::808:808", ClassIPv4Compatible},
		{"100::1", ClassDiscard},
		{"64:ff9b:1::1", ClassNAT64Local},
		// Translation prefixes, by the IPv4 address they embed.
		{"64:ff9b::7f00:1", "nat64:loopback"},
		{"64:ff9b::a00:5", "nat64:private"},
		{"64:ff9b::a9fe:a9fe", "nat64:metadata"},
		{"64:ff9b::808:808", ClassPublic},
		{"2002:7f00:1::1", "6to4:loopback"},
		{"2002:c0a8:101::1", "6to4:private"},
		{"2002:808:808::1", ClassPublic},
		// Teredo: server 65.54.227.120, client 127.0.0.1 obfuscated (^0xff).
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", "teredo:loopback"},
		// Teredo: server 10.0.0.1, client 8.8.8.8.
		{"2001:0:a00:1::f7f7:f7f7", "teredo:private"},
		// Teredo: server 65.54.227.120, client 8.8.8.8.
		{"2001:0:4136:e378::f7f7:f7f7", ClassPublic},
		// Public.
		{"8.8.8.8", ClassPublic},
		{"1.1.1.1", ClassPublic},
		{"172.32.0.1", ClassPublic},
		{"100.128.0.1", ClassPublic},
		{"169.255.0.1", ClassPublic},
		{"2606:4700::1111", ClassPublic},
		{"2a00:1450:4001::1", ClassPublic},
	}
	for _, tt := range tests {
		class, special := Classify(netip.MustParseAddr(tt.ip))
		if class != tt.class || special != (tt.class != ClassPublic) {
			t.Errorf("Classify(%s) = %q, %v; want %q", tt.ip, class, special, tt.class)
		}
	}
	if class, special := Classify(netip.Addr{}); class != ClassInvalid || !special {
		t.Errorf("Classify(zero) = %q, %v", class, special)
	}
	if class, special := Classify(netip.MustParseAddr("fe80::1%eth0")); class != ClassLinkLocal || !special {
		t.Errorf("Classify(fe80::1%%eth0) = %q, %v", class, special)
	}
}

func TestDescribe(t *testing.T) {
	for class, want := range map[string]string{
		ClassPrivate:     "a private address",
		ClassMetadata:    "a cloud metadata address",
		"nat64:loopback": "a NAT64 address embedding a loopback address",
		ClassUnspecified: "an unspecified address",
	} {
		if got := describe(class); got != want {
			t.Errorf("describe(%q) = %q, want %q", class, got, want)
		}
	}
}
