package netpolicy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestCanonicalHostLiterals(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		// 127.0.0.1 in every spelling inet_aton and IPv6 accept.
		{"127.0.0.1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"0x7f000001", "127.0.0.1"},
		{"0X7F000001", "127.0.0.1"},
		{"017700000001", "127.0.0.1"},
		{"0x7f.1", "127.0.0.1"},
		{"0177.0.0.1", "127.0.0.1"},
		{"0177.0.0.01", "127.0.0.1"},
		{"0x7f.0.0.1", "127.0.0.1"},
		{"0x7f.0x0.0x0.0x1", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"127.0.0.1.", "127.0.0.1"},
		{"127.000.000.001", "127.0.0.1"},
		{"::ffff:127.0.0.1", "127.0.0.1"},
		{"[::ffff:127.0.0.1]", "127.0.0.1"},
		{"::ffff:7f00:1", "127.0.0.1"},
		{"0:0:0:0:0:ffff:7f00:1", "127.0.0.1"},
		{"[0:0:0:0:0:FFFF:127.0.0.1]", "127.0.0.1"},
		// ::1
		{"[::1]", "::1"},
		{"::1", "::1"},
		{"0:0:0:0:0:0:0:1", "::1"},
		{"[0000:0000:0000:0000:0000:0000:0000:0001]", "::1"},
		// 169.254.169.254
		{"169.254.169.254", "169.254.169.254"},
		{"2852039166", "169.254.169.254"},
		{"0xa9fea9fe", "169.254.169.254"},
		{"025177524776", "169.254.169.254"},
		{"0251.0376.0251.0376", "169.254.169.254"},
		{"0xa9.0xfe.0xa9.0xfe", "169.254.169.254"},
		{"169.254.43518", "169.254.169.254"},
		{"169.16689662", "169.254.169.254"},
		{"0xa9.16689662", "169.254.169.254"},
		{"::ffff:169.254.169.254", "169.254.169.254"},
		{"[::ffff:a9fe:a9fe]", "169.254.169.254"},
		// IPv4-compatible stays IPv6: Linux does not route it to IPv4.
		{"::127.0.0.1", "::7f00:1"},
		// Others.
		{"0", "0.0.0.0"},
		{"0x", "0.0.0.0"},
		{"255.255.255.255", "255.255.255.255"},
		{"4294967295", "255.255.255.255"},
		{"[2001:DB8::1]", "2001:db8::1"},
		{"fd00:ec2::254", "fd00:ec2::254"},
	}
	for _, tt := range tests {
		host, ip, isIP, err := CanonicalHost(tt.in)
		if err != nil || !isIP || host != tt.want || ip.String() != tt.want {
			t.Errorf("CanonicalHost(%q) = %q, %v, %v, %v; want %q as an IP", tt.in, host, ip, isIP, err, tt.want)
		}
	}
}

func TestCanonicalHostNames(t *testing.T) {
	tests := []struct{ in, want string }{
		{"example.com", "example.com"},
		{"Example.COM.", "example.com"},
		{"a-b.example.com", "a-b.example.com"},
		{"_dmarc.example.com", "_dmarc.example.com"},
		{"xn--bcher-kva.de", "xn--bcher-kva.de"},
		{"localhost", "localhost"},
		{"deadbeef", "deadbeef"}, // all hex but no 0x: a name, as for inet_aton
		{"0x7f.foo", "0x7f.foo"}, // the last label decides
		{"1.2.3.4.nip.io", "1.2.3.4.nip.io"},
		{"123abc", "123abc"},
		{strings.Repeat("a", 63) + ".com", strings.Repeat("a", 63) + ".com"},
	}
	for _, tt := range tests {
		host, ip, isIP, err := CanonicalHost(tt.in)
		if err != nil || isIP || ip.IsValid() || host != tt.want {
			t.Errorf("CanonicalHost(%q) = %q, %v, %v, %v; want name %q", tt.in, host, ip, isIP, err, tt.want)
		}
	}
}

func TestCanonicalHostRefused(t *testing.T) {
	long := strings.Repeat("a.", 126) + "ab" // 254 bytes
	tests := []struct{ in, why string }{
		{"", "empty"},
		{"evil.com\x00.allowed.test", `'\x00'`},
		{"allowed.test\x00", `'\x00'`},
		{"a b.com", "' '"},
		{"a\tb.com", `'\t'`},
		{"a\r\nb.com", `'\r'`},
		{"a/b", "'/'"},
		{"a\\b", `'\\'`},
		{"user@host", "'@'"},
		{"a?b", "'?'"},
		{"a#b", "'#'"},
		{"a!b.com", "'!'"},
		{"a,b.com", "','"},
		{"a*b.com", "'*'"},
		{"*.example.com", "'*'"},
		{"a%2eb", "percent"},
		{"fe80::1%eth0", "zones"},
		{"[fe80::1%25eth0]", "zones"},
		{"bücher.de", "non-ASCII"},
		{"exa\xffmple.com", "non-ASCII"},
		{"[127.0.0.1]", "brackets"},
		{"[::1", "brackets"},
		{"::1]", "brackets"},
		{"[[::1]]", "brackets"},
		{"a[::1]", "brackets"},
		{"1.2.3.4.5", "IPv4"},
		{"256.1.1.1", "IPv4"},
		{"1.2.3.256", "IPv4"},
		{"1.2.65536", "IPv4"},
		{"1.16777216", "IPv4"},
		{"4294967296", "IPv4"},
		{"0x100000000", "IPv4"},
		{"08.1.1.1", "IPv4"},
		{"0x7g.1", "IPv4"},
		{"1..1", "IPv4"},
		{".1", "IPv4"},
		{"example.123", "IPv4"},
		{"example.0x1f", "IPv4"},
		{"1.2.3.4..", "empty label"},
		{"-a.com", "'-'"},
		{"a-.com", "'-'"},
		{"a..com", "empty label"},
		{".", "empty"},
		{".com", "empty label"},
		{strings.Repeat("a", 64) + ".com", "longer than 63"},
		{long, "253"},
		{strings.Repeat("a", 300), "253"},
		{"a:b", "IPv6"},
		{"1:2:3:4:5:6:7:8:9", "IPv6"},
	}
	for _, tt := range tests {
		host, _, _, err := CanonicalHost(tt.in)
		var he *HostError
		if !errors.As(err, &he) {
			t.Errorf("CanonicalHost(%q) = %q, %v; want a *HostError", tt.in, host, err)
			continue
		}
		if he.Host != tt.in || !strings.Contains(err.Error(), tt.why) {
			t.Errorf("CanonicalHost(%q): error %q, want one mentioning %q", tt.in, err, tt.why)
		}
		if strings.ContainsAny(err.Error(), "\x00\r\n") {
			t.Errorf("CanonicalHost(%q): error %q holds raw control bytes", tt.in, err)
		}
	}
}

func TestParseIPv4AgreesWithNetip(t *testing.T) {
	// Plain dotted-decimal input must mean what it means everywhere.
	for _, s := range []string{"1.2.3.4", "0.0.0.0", "10.0.0.5", "192.168.1.255", "8.8.8.8"} {
		got, ok := parseIPv4(s)
		if want := netip.MustParseAddr(s); !ok || got != want {
			t.Errorf("parseIPv4(%q) = %v, %v; want %v", s, got, ok, want)
		}
	}
}

func TestSplitAuthority(t *testing.T) {
	tests := []struct {
		in      string
		def     int
		host    string
		port    int
		wantErr bool
	}{
		{"a.test:443", 0, "a.test", 443, false},
		{"a.test", 80, "a.test", 80, false},
		{"a.test:", 80, "a.test", 80, false},
		{"[::1]:8080", 0, "[::1]", 8080, false},
		{"[::1]", 80, "[::1]", 80, false},
		{"a.test", 0, "", 0, true},
		{"a.test:0", 0, "", 0, true},
		{"a.test:65536", 0, "", 0, true},
		{"a.test:+443", 0, "", 0, true},
		{"a.test:-1", 0, "", 0, true},
		{"a.test:44 3", 0, "", 0, true},
		{"::1:443", 0, "", 0, true},
		{"[::1]x", 0, "", 0, true},
		{"[::1", 0, "", 0, true},
		{"", 80, "", 0, true},
	}
	for _, tt := range tests {
		host, port, err := splitAuthority(tt.in, tt.def)
		if (err != nil) != tt.wantErr || host != tt.host || port != tt.port {
			t.Errorf("splitAuthority(%q, %d) = %q, %d, %v", tt.in, tt.def, host, port, err)
		}
	}
}
