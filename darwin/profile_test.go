package darwin

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const testTag = "agentrun_0123456789abcdef"

// stubResolver applies the fixed macOS aliases, then the given symlinks
// (the tests use links that do not nest, so their order does not matter).
func stubResolver(links map[string]string) Resolver {
	return func(p string) (string, error) {
		c, err := StaticResolver(p)
		if err != nil {
			return "", err
		}
		for from, to := range links {
			if rest, ok := cutDir(c, from); ok {
				return to + rest, nil
			}
		}
		return c, nil
	}
}

func baseSpec() Spec {
	return Spec{
		Tag:       testTag,
		Workspace: "/Users/alice/proj",
		Home:      "/Users/alice",
		TempDirs:  []string{"/var/folders/xy/abc123/T/agentrun-42"},
		Network:   NetworkNone,
	}
}

type goldenCase struct {
	name  string
	spec  func() Spec
	links map[string]string
}

func goldenCases() []goldenCase {
	return []goldenCase{
		{name: "default", spec: baseSpec},
		{name: "mounts", spec: func() Spec {
			s := baseSpec()
			s.Mounts = []Mount{
				{Path: "/Users/alice/datasets"},
				{Path: "/Users/alice/.cache/go-build", Writable: true},
				{Path: "/Users/alice/proj/vendor"},
				{Path: "/Users/alice/proj/vendor/build", Writable: true},
				{Path: "/tmp/shared"},
			}
			s.Terminals, s.TerminalIoctl = []string{"/dev/ttys003"}, true
			s.ExtraSystemRead = []string{"/Applications/Xcode.app/Contents/Developer"}
			return s
		}},
		{name: "network-host", spec: func() Spec {
			s := baseSpec()
			s.Network = NetworkHost
			return s
		}},
		{name: "network-proxy", spec: func() Spec {
			s := baseSpec()
			s.Network, s.ProxyPort = NetworkProxy, 3128
			return s
		}},
		{
			name: "secrets",
			spec: func() Spec {
				s := baseSpec()
				s.Workspace = "/Users/alice"
				s.Mounts = []Mount{{Path: "/Users/alice/.aws/config"}}
				return s
			},
			links: map[string]string{"/Users/alice/.ssh": "/Users/alice/dotfiles/ssh"},
		},
	}
}

// render is the golden form: warnings and -D parameters as comments, then
// the profile text exactly as sandbox-exec receives it.
func render(p *Profile) string {
	var b strings.Builder
	b.WriteString(";; golden: regenerate with go test ./darwin/ -update\n")
	for _, w := range p.Warnings {
		b.WriteString(";; warning: " + w + "\n")
	}
	for _, prm := range p.Params {
		b.WriteString(";; -D " + prm.Key + "=" + prm.Value + "\n")
	}
	return b.String() + p.Text
}

func TestGoldenProfiles(t *testing.T) {
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			p, err := Compile(c.spec(), stubResolver(c.links))
			if err != nil {
				t.Fatal(err)
			}
			got := render(p)
			file := filepath.Join("testdata", c.name+".sb")
			if *update {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("profile differs from %s (run with -update to accept):\n%s", file, firstDiff(string(want), got))
			}
		})
	}
}

func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n  want %q\n  got  %q", i+1, wl, gl)
		}
	}
	return "(no line differs)"
}

func TestCompileIsDeterministic(t *testing.T) {
	for _, c := range goldenCases() {
		a, err := Compile(c.spec(), stubResolver(c.links))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Compile(c.spec(), stubResolver(c.links))
		if render(a) != render(b) {
			t.Errorf("%s: two compilations differ", c.name)
		}
	}
}

// hasFilter reports whether the profile has (kind (param "KEY")) for a
// parameter whose value is value.
func hasFilter(p *Profile, kind, value string) bool {
	for _, prm := range p.Params {
		if prm.Value == value && strings.Contains(p.Text, "("+kind+` (param "`+prm.Key+`"))`) {
			return true
		}
	}
	return false
}

func keyOf(t *testing.T, p *Profile, role, value string) string {
	t.Helper()
	for _, prm := range p.Params {
		if prm.Value == value && strings.HasPrefix(prm.Key, role+"_") {
			return prm.Key
		}
	}
	t.Fatalf("no %s parameter for %s", role, value)
	return ""
}

func TestPathsAreParametersAndCanonical(t *testing.T) {
	s := baseSpec()
	s.Workspace = `/Users/alice/my "proj" (1); x`
	p, err := Compile(s, stubResolver(nil))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(p.Text, "/Users/alice") {
		t.Error("a host path appears in the profile text instead of a parameter")
	}
	if !hasFilter(p, "subpath", `/Users/alice/my "proj" (1); x`) {
		t.Error("workspace with quotes and parentheses is not granted through a parameter")
	}
	if !hasFilter(p, "subpath", "/private/var/folders/xy/abc123/T/agentrun-42") {
		t.Error("temporary directory was not canonicalized to /private/var")
	}
}

func TestSecretsComeLastAndCoverEverySpelling(t *testing.T) {
	c := goldenCases()[4]
	p, err := Compile(c.spec(), stubResolver(c.links))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"/Users/alice/.ssh", "/Users/alice/dotfiles/ssh",
		"/System/Volumes/Data/Users/alice/.ssh", "/Users/alice/.zshrc", "/Library/Keychains",
	} {
		if !hasFilter(p, "subpath", want) {
			t.Errorf("secret %s is not denied", want)
		}
	}
	ws := strings.Index(p.Text, `(subpath (param "`+keyOf(t, p, "RW", "/Users/alice")+`"))`)
	deny := strings.Index(p.Text, "(deny file-read* file-write*")
	if ws < 0 || deny < ws {
		t.Error("the secret deny must follow the workspace grant, or the grant reopens it")
	}
	if !hasFilter(p, "literal", "/Users/alice") || !hasFilter(p, "literal", "/Users/alice/.config") {
		t.Error("directories holding secrets inside the writable home are not guarded against moves")
	}
	regrant := strings.LastIndex(p.Text, `(subpath (param "`+keyOf(t, p, "RO", "/Users/alice/.aws/config")+`"))`)
	if regrant < deny {
		t.Error("an explicit mount inside a secret must be granted again after the secret deny")
	}
	if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "/Users/alice/.aws/config") {
		t.Errorf("warnings = %q, want one about the mount inside ~/.aws", p.Warnings)
	}
}

func TestReadOnlyInsideWritableDeniesWrites(t *testing.T) {
	s := baseSpec()
	s.Mounts = []Mount{{Path: "/Users/alice/proj/vendor"}, {Path: "/Users/alice/other"}}
	p, err := Compile(s, stubResolver(nil))
	if err != nil {
		t.Fatal(err)
	}
	vendor := keyOf(t, p, "RO", "/Users/alice/proj/vendor")
	if !strings.Contains(p.Text, "(deny file-write*\n  (subpath (param \""+vendor+"\"))") {
		t.Error("read-only mount inside the workspace is not write-denied")
	}
	other := keyOf(t, p, "RO", "/Users/alice/other")
	if strings.Contains(p.Text, "(deny file-write*\n  (subpath (param \""+other+"\"))") {
		t.Error("read-only mount outside any writable grant needs no write deny")
	}
}

func TestNetworkModes(t *testing.T) {
	for _, c := range []struct {
		net      Network
		port     int
		want     []string
		mustNot  []string
		wantMach bool
	}{
		{net: NetworkNone, mustNot: []string{"remote ip", "local ip", "com.apple.dnssd.service", "com.apple.trustd"}},
		{net: NetworkHost, want: []string{`(allow network-outbound (remote ip "*:*"))`, "com.apple.dnssd.service", "com.apple.trustd.agent"}},
		{net: NetworkProxy, port: 8080, want: []string{`(allow network-outbound (remote ip "localhost:8080"))`},
			mustNot: []string{`"*:*"`, "local ip", "com.apple.dnssd.service", "com.apple.trustd"}},
	} {
		s := baseSpec()
		s.Network, s.ProxyPort = c.net, c.port
		p, err := Compile(s, stubResolver(nil))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range c.want {
			if !strings.Contains(p.Text, w) {
				t.Errorf("%s: missing %s", c.net, w)
			}
		}
		for _, w := range c.mustNot {
			if strings.Contains(p.Text, w) {
				t.Errorf("%s: must not contain %s", c.net, w)
			}
		}
	}
}

func TestLongPathListsAreSplit(t *testing.T) {
	s := baseSpec()
	for i := range 3*MaxFiltersPerRule + 5 {
		s.ExtraSystemRead = append(s.ExtraSystemRead, fmt.Sprintf("/opt/tools/t%03d", i))
	}
	p, err := Compile(s, stubResolver(nil))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(p.Text, "(allow file-read* file-map-executable\n"); n < 4 {
		t.Errorf("system read rule split into %d rules, want at least 4", n)
	}
}

func TestTooManyPathsFailsClosed(t *testing.T) {
	s := baseSpec()
	long := strings.Repeat("d", 200)
	for i := range 400 {
		s.Mounts = append(s.Mounts, Mount{Path: fmt.Sprintf("/Users/alice/%s/%03d", long, i)})
	}
	_, err := Compile(s, stubResolver(nil))
	if err == nil || !strings.Contains(err.Error(), "too many paths") {
		t.Fatalf("err = %v, want the profile size limit", err)
	}
}

func TestCompileRejects(t *testing.T) {
	errResolve := func(string) (string, error) { return "", errors.New("boom") }
	for _, c := range []struct {
		name    string
		edit    func(*Spec)
		resolve Resolver
		want    string
	}{
		{name: "tag", edit: func(s *Spec) { s.Tag = "bad tag!" }, want: "message tag"},
		{name: "short tag", edit: func(s *Spec) { s.Tag = "abc" }, want: "message tag"},
		{name: "relative workspace", edit: func(s *Spec) { s.Workspace = "proj" }, want: "not absolute"},
		{name: "root workspace", edit: func(s *Spec) { s.Workspace = "/" }, want: "whole disk"},
		{name: "newline", edit: func(s *Spec) { s.Mounts = []Mount{{Path: "/a\nb"}} }, want: "line break"},
		{name: "nul", edit: func(s *Spec) { s.TempDirs = []string{"/a\x00b"} }, want: "NUL"},
		{name: "network", edit: func(s *Spec) { s.Network = "bridge" }, want: "unknown network"},
		{name: "proxy port", edit: func(s *Spec) { s.Network = NetworkProxy }, want: "not a TCP port"},
		{name: "resolver", edit: func(*Spec) {}, resolve: errResolve, want: "boom"},
		{name: "resolves to root", edit: func(*Spec) {}, resolve: func(string) (string, error) { return "/", nil }, want: "resolves to /"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := baseSpec()
			c.edit(&s)
			r := c.resolve
			if r == nil {
				r = StaticResolver
			}
			_, err := Compile(s, r)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to mention %q", err, c.want)
			}
		})
	}
}

func TestTerminalIoctlOnlyWhenAllowed(t *testing.T) {
	for _, ioctl := range []bool{false, true} {
		s := baseSpec()
		s.Terminals, s.TerminalIoctl = []string{"/dev/ttys009"}, ioctl
		p, err := Compile(s, stubResolver(nil))
		if err != nil {
			t.Fatal(err)
		}
		key := keyOf(t, p, "TTY", "/dev/ttys009")
		rule := "(allow file-read* file-write-data file-ioctl\n  (literal (param \"" + key + "\")))"
		if got := strings.Contains(p.Text, rule); got != ioctl {
			t.Errorf("TerminalIoctl=%v: ioctl rule present = %v", ioctl, got)
		}
	}
}
