package netpolicy

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParseAllowGood(t *testing.T) {
	tests := []struct {
		in   []string
		want string // String() of the result
	}{
		{nil, ""},
		{[]string{"example.com"}, "example.com"},
		{[]string{"Example.COM.:8443"}, "example.com:8443"},
		{[]string{"a.com,b.com:8443"}, "a.com,b.com:8443"},
		{[]string{" a.com , b.com "}, "a.com,b.com"},
		{[]string{"*.example.com", "x.test:22"}, "*.example.com,x.test:22"},
		{[]string{"_acme.example.com"}, "_acme.example.com"},
		{[]string{"192.0.2.7"}, "192.0.2.7"},
		{[]string{"192.0.2.7:22"}, "192.0.2.7:22"},
		{[]string{"0x7f.1:8080"}, "127.0.0.1:8080"},
		{[]string{"10.0.0.0/8"}, "10.0.0.0/8"},
		{[]string{"10.0.0.0/8:5432"}, "10.0.0.0/8:5432"},
		{[]string{"[2001:db8::1]:443"}, "[2001:db8::1]:443"},
		{[]string{"[fd00::/8]:443"}, "[fd00::/8]:443"},
		{[]string{"fd00::/8"}, "fd00::/8"},
		{[]string{"::1"}, "::1"},
		{[]string{"[::1]"}, "::1"},
		{[]string{"[::ffff:10.0.0.0/104]:80"}, "10.0.0.0/8:80"},
		{[]string{"[::ffff:127.0.0.1]:80"}, "127.0.0.1:80"},
		{[]string{"a.com:65535"}, "a.com:65535"},
		{[]string{"a.com:00443"}, "a.com:443"},
	}
	for _, tt := range tests {
		p, err := ParseAllow(tt.in)
		if err != nil {
			t.Errorf("ParseAllow(%q): %v", tt.in, err)
			continue
		}
		if got := strings.Join(p.Entries(), ","); got != tt.want {
			t.Errorf("ParseAllow(%q).Entries() = %q, want %q", tt.in, got, tt.want)
		}
		if got := p.String(); got != tt.want {
			t.Errorf("ParseAllow(%q).String() = %q, want %q", tt.in, got, tt.want)
		}
		// The canonical form parses to the same policy.
		if p2, err := ParseAllow([]string{p.String()}); tt.want != "" && (err != nil || p2.String() != p.String()) {
			t.Errorf("ParseAllow(%q) does not round-trip: %v, %v", p.String(), p2, err)
		}
	}
}

func TestParseAllowBad(t *testing.T) {
	tests := []struct {
		entry string
		why   string
	}{
		{"", "empty entry"},
		{"a.com,", "empty entry"},
		{"a.com,,b.com", "empty entry"},
		{"a.com:0", "port 0 is out of range"},
		{"a.com:65536", "out of range"},
		{"a.com:123456", "out of range"},
		{"a.com:", "empty port"},
		{"a.com:http", "not a decimal number"},
		{"a.com:+80", "not a decimal number"},
		{":80", "empty host"},
		{"http://a.com", "not a URL"},
		{"a.com/path", "not a name"},
		{"a b.com", "' '"},
		{"evil.com\x00.a.com", `'\x00'`},
		{"bücher.de", "punycode"},
		{"*", "'*' alone"},
		{"*.*.com", "whole first label"},
		{"a.*.com", "whole first label"},
		{"*a.com", "whole first label"},
		{"*.10.0.0.1", "needs a domain name"},
		{"-a.com", "starts or ends with '-'"},
		{strings.Repeat("a", 64) + ".com", "longer than 63"},
		{"a..com", "empty label"},
		{"1.2.3.4.5", "IPv4"},
		{"10.0.0.5/8", "host bits are set (did you mean 10.0.0.0/8?)"},
		{"10.0.0.0/33", "longer than 32"},
		{"10.0.0.0/x", "not a number"},
		{"10.0.0.0/", "not a number"},
		{"10.0.0.0/-1", "not a number"},
		{"[fd00::/129]", "longer than 128"},
		{"[fd00::1/8]", "host bits"},
		{"[::ffff:10.0.0.0/8]", "at least 96"},
		{"[10.0.0.1]:80", "brackets hold only IPv6"},
		{"[::1]x", "after ']'"},
		{"[::1", "missing ']'"},
		{"[fe80::1%eth0]:80", "zones"},
		{"a.com:80:90", "IPv6"},
		{"example.com/8", "not a name"},
	}
	for _, tt := range tests {
		p, err := ParseAllow([]string{"ok.test", tt.entry})
		if err == nil {
			t.Errorf("ParseAllow(%q) = %v, want an error", tt.entry, p)
			continue
		}
		if !strings.Contains(err.Error(), tt.why) {
			t.Errorf("ParseAllow(%q): %v; want one mentioning %q", tt.entry, err, tt.why)
		}
		if !strings.Contains(err.Error(), "allow entry") {
			t.Errorf("ParseAllow(%q): %v does not name the entry", tt.entry, err)
		}
	}
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func TestDecide(t *testing.T) {
	p, err := ParseAllow([]string{
		"allowed.test",
		"*.wild.test:8443",
		"odd.test:22",
		"lifted.test:8080,127.0.0.1:8080",
		"any.test:9999",
		"db.test:5432",
		"10.0.0.0/8:5432",
		"0.0.0.0/0:9999",
		"169.254.0.0/16",
		"[fd00::/8]:443",
		"192.0.2.0/24:443",
		"169.254.169.254:8000",
	})
	if err != nil {
		t.Fatal(err)
	}
	pub := addrs("93.184.215.14")
	tests := []struct {
		name     string
		host     string
		port     int
		resolved []netip.Addr
		allowed  bool
		addr     string // the address to connect to
		reason   string // a part of the reason
		suggest  string
	}{
		{"name default 443", "allowed.test", 443, pub, true, "93.184.215.14", "", ""},
		{"name default 80", "ALLOWED.test.", 80, pub, true, "93.184.215.14", "", ""},
		{"name other port", "allowed.test", 8080, pub, false, "", "allowed only on port 80, 443, not 8080", "--allow-net allowed.test:8080"},
		{"name not listed", "evil.test", 443, pub, false, "", "evil.test:443 is not in the allow list", "--allow-net evil.test:443"},
		{"suffix trick", "evilallowed.test", 443, pub, false, "", "not in the allow list", "--allow-net evilallowed.test:443"},
		{"subdomain of exact", "a.allowed.test", 443, pub, false, "", "not in the allow list", ""},
		{"wildcard sub", "a.wild.test", 8443, pub, true, "93.184.215.14", "", ""},
		{"wildcard deep", "a.b.wild.test", 8443, pub, true, "93.184.215.14", "", ""},
		{"wildcard apex", "wild.test", 8443, pub, false, "", "not in the allow list", ""},
		{"wildcard port", "a.wild.test", 443, pub, false, "", "allowed only on port 8443", ""},
		{"explicit port only", "odd.test", 22, pub, true, "93.184.215.14", "", ""},
		{"explicit port no default", "odd.test", 443, pub, false, "", "allowed only on port 22", ""},
		{"NUL name", "evil.com\x00.allowed.test", 443, pub, false, "", `'\x00'`, ""},
		{"no addresses", "allowed.test", 443, nil, false, "", "has no addresses", ""},
		{"port 0", "allowed.test", 0, pub, false, "", "port 0 is out of range", ""},
		{"port 65536", "allowed.test", 65536, pub, false, "", "out of range", ""},

		// DNS rebinding and friends.
		{"rebind private", "allowed.test", 443, addrs("10.0.0.5"), false, "", "allowed.test resolves to a private address 10.0.0.5", "--allow-net 10.0.0.5:443"},
		{"rebind loopback", "allowed.test", 443, addrs("127.0.0.1"), false, "", "resolves to a loopback address 127.0.0.1", ""},
		{"rebind mapped loopback", "allowed.test", 443, addrs("::ffff:127.0.0.1"), false, "", "loopback address 127.0.0.1", ""},
		{"rebind v6 loopback", "allowed.test", 443, addrs("::1"), false, "", "loopback address ::1", "--allow-net [::1]:443"},
		{"rebind metadata", "allowed.test", 80, addrs("169.254.169.254"), false, "", "cloud metadata address 169.254.169.254", ""},
		{"rebind nat64 loopback", "allowed.test", 443, addrs("64:ff9b::7f00:1"), false, "", "NAT64 address embedding a loopback", ""},
		{"rebind unspecified", "allowed.test", 443, addrs("0.0.0.0"), false, "", "unspecified", ""},
		{"mix public first", "allowed.test", 443, addrs("93.184.215.14", "10.0.0.5"), false, "", "resolves to a private address 10.0.0.5 (one of 2 addresses", "--allow-net 10.0.0.5:443"},
		{"mix private first", "allowed.test", 443, addrs("10.0.0.5", "93.184.215.14"), false, "", "10.0.0.5", ""},
		{"mix two special", "allowed.test", 443, addrs("10.0.0.5", "127.0.0.1"), false, "", "10.0.0.5", "--allow-net 10.0.0.5:443,127.0.0.1:443"},
		{"invalid answer", "allowed.test", 443, []netip.Addr{{}}, false, "", "invalid address", ""},
		{"several fine", "allowed.test", 443, addrs("93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c", "93.184.215.14"), true, "93.184.215.14", "", ""},

		// Lifting the guard explicitly.
		{"lifted name", "lifted.test", 8080, addrs("127.0.0.1"), true, "127.0.0.1", "", ""},
		{"lifted name other port", "lifted.test", 443, addrs("127.0.0.1"), false, "", "allowed only on port 8080", "--allow-net lifted.test:443"},
		{"lifted name mapped", "lifted.test", 8080, addrs("::ffff:127.0.0.1"), true, "127.0.0.1", "", ""},
		{"lift is per port", "allowed.test", 443, addrs("127.0.0.1"), false, "", "loopback", "--allow-net 127.0.0.1:443"},
		{"range lifts only its port", "x.wild.test", 8443, addrs("10.1.2.3"), false, "", "private", ""},
		{"private range lifts", "db.test", 5432, addrs("10.1.2.3"), true, "10.1.2.3", "", ""},
		{"/0 lifts nothing", "any.test", 9999, addrs("10.0.0.5"), false, "", "private", ""},

		// IP literals.
		{"literal lifted", "127.0.0.1", 8080, nil, true, "127.0.0.1", "", ""},
		{"literal decimal", "2130706433", 8080, nil, true, "127.0.0.1", "", ""},
		{"literal hex short", "0x7f.1", 8080, nil, true, "127.0.0.1", "", ""},
		{"literal octal", "0177.0.0.1", 8080, nil, true, "127.0.0.1", "", ""},
		{"literal mapped", "[::ffff:127.0.0.1]", 8080, nil, true, "127.0.0.1", "", ""},
		{"literal other port", "127.1", 80, nil, false, "", "127.0.0.1:80 is not in the allow list (127.0.0.1 is a loopback address)", "--allow-net 127.0.0.1:80"},
		{"literal other loopback", "127.0.0.2", 8080, nil, false, "", "loopback", ""},
		{"literal v6 loopback", "[::1]", 8080, nil, false, "", "[::1]:8080 is not in the allow list", "--allow-net [::1]:8080"},
		{"literal ignores resolved", "10.9.9.9", 5432, addrs("127.0.0.1"), true, "10.9.9.9", "", ""},
		{"literal range port", "10.9.9.9", 80, nil, false, "", "not in the allow list", ""},
		{"literal public in /0", "8.8.8.8", 9999, nil, true, "8.8.8.8", "", ""},
		{"literal private not in /0", "192.168.1.1", 9999, nil, false, "", "private", ""},
		{"literal public not listed", "8.8.8.8", 443, nil, false, "", "8.8.8.8:443 is not in the allow list", "--allow-net 8.8.8.8:443"},
		{"literal link-local lifted", "169.254.1.1", 80, nil, true, "169.254.1.1", "", ""},
		{"metadata not lifted by range", "169.254.169.254", 80, nil, false, "", "cloud metadata", ""},
		{"metadata decimal", "2852039166", 80, nil, false, "", "169.254.169.254:80", ""},
		{"metadata lifted exactly", "0xa9fea9fe", 8000, nil, true, "169.254.169.254", "", ""},
		{"v6 range", "[fd00::1]", 443, nil, true, "fd00::1", "", ""},
		{"v6 metadata in range", "[fd00:ec2::254]", 443, nil, false, "", "cloud metadata", ""},
		{"documentation lifted", "192.0.2.9", 443, nil, true, "192.0.2.9", "", ""},
		{"literal not as name", "127.0.0.1.", 8080, nil, true, "127.0.0.1", "", ""},
		{"IP not allowed by name", "93.184.215.14", 443, nil, false, "", "not in the allow list", ""},
	}
	for _, tt := range tests {
		d := p.Decide(tt.host, tt.port, tt.resolved)
		if d.Allowed != tt.allowed {
			t.Errorf("%s: Decide(%q, %d, %v) = %+v; want allowed=%v", tt.name, tt.host, tt.port, tt.resolved, d, tt.allowed)
			continue
		}
		if tt.allowed {
			if d.Addr.String() != tt.addr || len(d.Addrs) == 0 || d.Addrs[0] != d.Addr || d.Reason != "" {
				t.Errorf("%s: Decide(%q, %d) = %+v; want address %s", tt.name, tt.host, tt.port, d, tt.addr)
			}
			continue
		}
		if d.Addr.IsValid() || !strings.Contains(d.Reason, tt.reason) || strings.Contains(d.Reason, "\n") {
			t.Errorf("%s: Decide(%q, %d): reason %q, want one containing %q", tt.name, tt.host, tt.port, d.Reason, tt.reason)
		}
		if tt.suggest != "" && d.Suggestion != tt.suggest {
			t.Errorf("%s: Decide(%q, %d): suggestion %q, want %q", tt.name, tt.host, tt.port, d.Suggestion, tt.suggest)
		}
	}

	// Duplicate answers are merged, order is kept.
	d := p.Decide("allowed.test", 443, addrs("93.184.215.14", "2606:2800::1", "93.184.215.14"))
	if len(d.Addrs) != 2 || d.Addrs[1] != netip.MustParseAddr("2606:2800::1") {
		t.Errorf("Addrs = %v", d.Addrs)
	}
}

func TestNilPolicyRefuses(t *testing.T) {
	var p *Policy
	if d := p.Decide("example.com", 443, addrs("93.184.215.14")); d.Allowed {
		t.Errorf("nil policy allowed %+v", d)
	}
	if d := (&Policy{}).Decide("8.8.8.8", 443, nil); d.Allowed {
		t.Errorf("zero policy allowed %+v", d)
	}
	if p.AllowsName("example.com") || p.String() != "" {
		t.Error("nil policy allows a name")
	}
}

func TestAllowsName(t *testing.T) {
	p, err := ParseAllow([]string{"a.test:22", "*.w.test", "10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"a.test": true, "A.TEST.": true, "x.w.test": true, "w.test": false,
		"b.test": false, "10.0.0.1": false, "a.test\x00": false,
	} {
		if got := p.AllowsName(name); got != want {
			t.Errorf("AllowsName(%q) = %v, want %v", name, got, want)
		}
	}
}

type mapResolver struct {
	m       map[string][]netip.Addr
	lookups chan<- string // when set, gets every name looked up
}

func (r mapResolver) LookupNetIP(_ context.Context, host string) ([]netip.Addr, error) {
	if r.lookups != nil {
		r.lookups <- host
	}
	if a, ok := r.m[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host " + host)
}

func TestCheckLooksUpOnlyAllowedNames(t *testing.T) {
	p, err := ParseAllow([]string{"allowed.test"})
	if err != nil {
		t.Fatal(err)
	}
	lookups := make(chan string, 10)
	r := mapResolver{m: map[string][]netip.Addr{
		"allowed.test": addrs("93.184.215.14"),
		"denied.test":  addrs("93.184.215.14"),
	}, lookups: lookups}
	ctx := context.Background()
	if d, err := p.Check(ctx, r, "denied.test", 443); err != nil || d.Allowed {
		t.Errorf("Check(denied.test) = %+v, %v", d, err)
	}
	if d, err := p.Check(ctx, r, "Allowed.Test", 443); err != nil || !d.Allowed || d.Addr != netip.MustParseAddr("93.184.215.14") {
		t.Errorf("Check(allowed.test) = %+v, %v", d, err)
	}
	if d, err := p.Check(ctx, r, "allowed.test", 8080); err != nil || d.Allowed {
		t.Errorf("Check(allowed.test:8080) = %+v, %v", d, err)
	}
	close(lookups)
	var got []string
	for h := range lookups {
		got = append(got, h)
	}
	if len(got) != 1 || got[0] != "allowed.test" {
		t.Errorf("looked up %q, want only the canonical allowed.test", got)
	}
	// A failed lookup is an error, not a refusal.
	p2, _ := ParseAllow([]string{"gone.test"})
	d, err := p2.Check(ctx, mapResolver{}, "gone.test", 443)
	if err == nil || d.Allowed || !strings.Contains(d.Reason, "looking up gone.test") {
		t.Errorf("Check(gone.test) = %+v, %v", d, err)
	}
}
