package darwin

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestArgs(t *testing.T) {
	p := &Profile{Text: "(version 1)", Params: []Param{{"WS_0", "/Users/a b/p"}, {"TMP_0", "/private/tmp/x=y"}}, Tag: testTag}
	got, err := Args(p, []string{"-weird", "arg one", "--"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"/usr/bin/sandbox-exec", "-p", "(version 1)",
		"-D", "WS_0=/Users/a b/p", "-D", "TMP_0=/private/tmp/x=y",
		"--", "-weird", "arg one", "--",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Args =\n %q\nwant\n %q", got, want)
	}
}

func TestArgsRejects(t *testing.T) {
	p := &Profile{Text: "(version 1)", Tag: testTag}
	for _, c := range []struct {
		name string
		p    *Profile
		argv []string
		want string
	}{
		{"no command", p, nil, "no command"},
		{"empty argv0", p, []string{""}, "no command"},
		{"nul arg", p, []string{"echo", "a\x00b"}, "NUL"},
		{"bad param", &Profile{Text: "x", Params: []Param{{"A", "/a\nb"}}}, []string{"true"}, "line break"},
	} {
		if _, err := Args(c.p, c.argv); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
}

func TestEnviron(t *testing.T) {
	for _, c := range []struct {
		name string
		base []string
		want []string
	}{
		{
			name: "default home moves to the run directory",
			base: []string{"PATH=/usr/bin", "HOME=/tmp", "LANG=C"},
			want: []string{"PATH=/usr/bin", "HOME=/run/d", "LANG=C", "TMPDIR=/run/d"},
		},
		{
			name: "policy choices stay",
			base: []string{"HOME=/Users/x/h", "TMPDIR=/Users/x/t"},
			want: []string{"HOME=/Users/x/h", "TMPDIR=/Users/x/t"},
		},
		{
			name: "values with = survive",
			base: []string{"A=b=c", "HOME=/tmp"},
			want: []string{"A=b=c", "HOME=/run/d", "TMPDIR=/run/d"},
		},
	} {
		if got := Environ(c.base, "/run/d"); !slices.Equal(got, c.want) {
			t.Errorf("%s: Environ = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestNewTag(t *testing.T) {
	a, err := NewTag()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewTag()
	if a == b {
		t.Error("two tags are equal")
	}
	if !regexp.MustCompile(`^agentrun_[0-9a-f]{16}$`).MatchString(a) || !tagPattern.MatchString(a) {
		t.Errorf("tag %q has the wrong shape", a)
	}
}

func TestCheckExecSize(t *testing.T) {
	if err := CheckExecSize([]string{"a", "b"}, []string{"X=1"}); err != nil {
		t.Error(err)
	}
	big := strings.Repeat("x", MaxExecBytes)
	if err := CheckExecSize([]string{big}, nil); err == nil {
		t.Error("oversized argv accepted")
	}
}

func TestLaunchArgsForGoldenProfileFit(t *testing.T) {
	p, err := Compile(goldenCases()[1].spec(), stubResolver(nil))
	if err != nil {
		t.Fatal(err)
	}
	args, err := Args(p, []string{"make", "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckExecSize(args, Environ([]string{"HOME=/tmp"}, "/tmp/x")); err != nil {
		t.Error(err)
	}
	if args[len(args)-3] != "--" {
		t.Errorf("command is not separated by --: %q", args[len(args)-4:])
	}
}
