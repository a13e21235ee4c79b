package darwin

import (
	"strings"
	"testing"
)

// minimal returns a valid profile with body appended and params defined.
func minimal(body string, params ...Param) *Profile {
	text := "(version 1)\n(deny default (with message \"" + testTag + "\"))\n" + body
	return &Profile{Text: text, Params: params, Tag: testTag}
}

func TestCheckAcceptsMinimal(t *testing.T) {
	p := minimal(`; a comment with "quotes" and (parens)
(allow file-read* (subpath (param "A_0")))
(allow sysctl-read (sysctl-name "kern.ostype"))
(allow file-ioctl (require-all (regex #"^/dev/ttys[0-9]+$") (extension "com.apple.sandbox.pty")))
(allow network-outbound (remote ip "localhost:3128"))
(allow network-bind (local ip "*:*"))
(allow mach-lookup (global-name "a\\b\"c"))
(allow file-read* (regex #"^/opt/a\.b\"c$"))
`, Param{Key: "A_0", Value: "/usr"})
	if err := Check(p); err != nil {
		t.Fatal(err)
	}
}

func TestCheckRejects(t *testing.T) {
	okParam := Param{Key: "A_0", Value: "/usr"}
	use := `(allow file-read* (subpath (param "A_0")))` + "\n"
	for _, c := range []struct {
		name string
		p    *Profile
		want string
	}{
		{"unbalanced open", minimal(use+"(allow file-read*", okParam), "unclosed"},
		{"unbalanced close", minimal(use+"(allow file-read*))", okParam), "unbalanced )"},
		{"unterminated string", minimal(use+`(allow mach-lookup (global-name "x))`, okParam), "unterminated"},
		{"bad escape", minimal(use+`(allow mach-lookup (global-name "a\qb"))`, okParam), "unknown escape"},
		{"newline in string", minimal(use+"(allow mach-lookup (global-name \"a\nb\"))", okParam), "line break"},
		{"literal too long", minimal(use+`(allow mach-lookup (global-name "`+strings.Repeat("x", MaxLiteralBytes+1)+`"))`, okParam), "over the 1024-byte limit"},
		{"no version", &Profile{Text: "(deny default (with message \"" + testTag + "\"))\n" + use, Params: []Param{okParam}, Tag: testTag}, "want (version 1)"},
		{"untagged default", &Profile{Text: "(version 1)\n(deny default)\n" + use, Params: []Param{okParam}, Tag: testTag}, "second form"},
		{"wrong tag", &Profile{Text: "(version 1)\n(deny default (with message \"other_tag_123\"))\n" + use, Params: []Param{okParam}, Tag: testTag}, "second form"},
		{"undefined param", minimal(use+`(allow file-read* (literal (param "B_0")))`, okParam), `"B_0" is not defined`},
		{"unused param", minimal(use, okParam, Param{Key: "B_0", Value: "/bin"}), "B_0 is defined but never referenced"},
		{"local ip outbound", minimal(use+`(allow network-outbound (local ip "localhost:*"))`, okParam), "matches every connection"},
		{"local ip network*", minimal(use+`(allow network* (local ip "*:*"))`, okParam), "matches every connection"},
		{"literal path", minimal(use+`(allow file-read* (subpath "/Users/alice"))`, okParam), "must take a (param"},
		{"param newline", minimal(use, Param{Key: "A_0", Value: "/us\nr"}), "line break"},
		{"param nul", minimal(use, Param{Key: "A_0", Value: "/us\x00r"}), "NUL"},
		{"param relative", minimal(use, Param{Key: "A_0", Value: "usr"}), "clean absolute"},
		{"param unclean", minimal(use, Param{Key: "A_0", Value: "/usr/../etc"}), "clean absolute"},
		{"param too long", minimal(use, Param{Key: "A_0", Value: "/" + strings.Repeat("x", MaxParamBytes)}), "path limit"},
		{"param key", minimal(`(allow file-read* (subpath (param "a-0")))`, Param{Key: "a-0", Value: "/usr"}), "is not [A-Z]"},
		{"param twice", minimal(use, okParam, okParam), "defined twice"},
		{"too many filters", minimal(use+"(allow mach-lookup"+strings.Repeat(` (global-name "x")`, MaxFiltersPerRule+1)+")", okParam), "filters, over"},
		{"unknown form", minimal(use+`(define x 1)`, okParam), "is not version, allow or deny"},
		{"bare atom", minimal(use+`allow`, okParam), "bare allow"},
		{"no operation", minimal(use+`(allow (subpath (param "A_0")))`, okParam), "names no operation"},
		{"too big", minimal(strings.Repeat(use, MaxProfileBytes/40), okParam), "too many paths"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Check(c.p)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to mention %q", err, c.want)
			}
		})
	}
}

func TestCheckReportsEveryProblem(t *testing.T) {
	p := minimal(`(allow file-read* (subpath "/a") (literal (param "X_0")))`, Param{Key: "A_0", Value: "/usr"})
	err := Check(p)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"must take a (param", `"X_0" is not defined`, "A_0 is defined but never referenced"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
}

func TestGoldenProfilesPassCheck(t *testing.T) {
	for _, c := range goldenCases() {
		p, err := Compile(c.spec(), stubResolver(c.links))
		if err != nil {
			t.Fatal(err)
		}
		if err := Check(p); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
