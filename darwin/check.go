package darwin

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Interpreter limits the checker enforces.
const (
	// MaxLiteralBytes is the longest string literal sandbox-exec reads;
	// longer ones fail with "Error reading string" and void the profile.
	MaxLiteralBytes = 1024
	// MaxParamBytes is the longest parameter value: a macOS path
	// (PATH_MAX 1024 including the NUL).
	MaxParamBytes = 1023
	// MaxProfileBytes bounds the compiled profile. The compiler refuses
	// data objects over 65535 bytes; the estimate is the text without
	// comments plus every parameter value once per reference, with room
	// to spare for the compiler's own framing.
	MaxProfileBytes = 60000
)

type nodeKind int

const (
	listNode nodeKind = iota
	atomNode
	stringNode
	regexNode
)

// node is one SBPL datum: a list, a bare atom, a "string" or a #"regex".
type node struct {
	kind nodeKind
	text string
	kids []*node
	line int
}

func (n *node) head() string {
	if n.kind != listNode || len(n.kids) == 0 || n.kids[0].kind != atomNode {
		return ""
	}
	return n.kids[0].text
}

func (n *node) String() string {
	switch n.kind {
	case listNode:
		parts := make([]string, len(n.kids))
		for i, k := range n.kids {
			parts[i] = k.String()
		}
		return "(" + strings.Join(parts, " ") + ")"
	case stringNode:
		return `"` + n.text + `"`
	case regexNode:
		return `#"` + n.text + `"`
	}
	return n.text
}

// Check verifies a profile's structure: it parses (balanced parentheses,
// terminated and escaped strings, no literal over MaxLiteralBytes), starts
// with (version 1) and a tagged (deny default), references only defined
// parameters and defines none it does not use, gives every path filter a
// parameter rather than a literal, never filters an outbound rule on the
// local address, keeps rules within MaxFiltersPerRule and the whole within
// MaxProfileBytes. All problems are returned together.
func Check(p *Profile) error {
	forms, size, err := parseSBPL(p.Text)
	if err != nil {
		return err
	}
	c := &checker{defined: map[string]string{}, used: map[string]bool{}}
	c.checkParams(p.Params)
	c.checkHeader(forms, p.Tag)
	for _, f := range forms {
		c.checkForm(f)
	}
	c.checkUnused(p.Params)
	c.checkSize(size)
	return errors.Join(c.errs...)
}

type checker struct {
	defined map[string]string
	used    map[string]bool
	refs    []string
	errs    []error
}

func (c *checker) fail(line int, format string, a ...any) {
	c.errs = append(c.errs, fmt.Errorf("line %d: %s", line, fmt.Sprintf(format, a...)))
}

var paramKeyPattern = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

func (c *checker) checkParams(ps []Param) {
	for _, p := range ps {
		if !paramKeyPattern.MatchString(p.Key) {
			c.errs = append(c.errs, fmt.Errorf("parameter key %q is not [A-Z][A-Z0-9_]*", p.Key))
		}
		if _, dup := c.defined[p.Key]; dup {
			c.errs = append(c.errs, fmt.Errorf("parameter %s defined twice", p.Key))
		}
		c.defined[p.Key] = p.Value
		if err := checkParamValue(p); err != nil {
			c.errs = append(c.errs, err)
		}
	}
}

// checkParamValue holds parameters to what a -D argument can carry and what
// Seatbelt matches: a clean absolute path without NUL or line breaks.
func checkParamValue(p Param) error {
	switch {
	case strings.ContainsAny(p.Value, "\x00\n\r"):
		return fmt.Errorf("parameter %s contains NUL or a line break", p.Key)
	case len(p.Value) > MaxParamBytes:
		return fmt.Errorf("parameter %s is %d bytes, over the %d-byte path limit", p.Key, len(p.Value), MaxParamBytes)
	case !path.IsAbs(p.Value) || path.Clean(p.Value) != p.Value:
		return fmt.Errorf("parameter %s = %q is not a clean absolute path", p.Key, p.Value)
	}
	return nil
}

func (c *checker) checkHeader(forms []*node, tag string) {
	if len(forms) < 2 {
		c.errs = append(c.errs, errors.New("profile needs (version 1) and (deny default ...)"))
		return
	}
	if forms[0].String() != "(version 1)" {
		c.fail(forms[0].line, "first form is %s, want (version 1)", forms[0])
	}
	want := `(deny default (with message "` + tag + `"))`
	if forms[1].String() != want {
		c.fail(forms[1].line, "second form is %s, want %s", forms[1], want)
	}
}

func (c *checker) checkForm(f *node) {
	switch f.head() {
	case "version":
		return
	case "allow", "deny":
		c.checkRule(f)
	default:
		c.fail(f.line, "top-level form %s is not version, allow or deny", f)
	}
}

// checkRule looks at one (allow|deny op... filter...) form.
func (c *checker) checkRule(f *node) {
	var ops []string
	filters := 0
	for _, k := range f.kids[1:] {
		switch {
		case k.kind == atomNode:
			ops = append(ops, k.text)
		case k.head() == "with":
		default:
			filters++
		}
	}
	if len(ops) == 0 {
		c.fail(f.line, "rule %s names no operation", f.head())
	}
	if filters > MaxFiltersPerRule {
		c.fail(f.line, "rule has %d filters, over %d", filters, MaxFiltersPerRule)
	}
	outbound := false
	for _, op := range ops {
		if op == "network-outbound" || op == "network*" || op == "network" {
			outbound = true
		}
	}
	c.walk(f, outbound)
}

var pathFilterHeads = map[string]bool{
	"literal": true, "subpath": true, "prefix": true,
	"path": true, "path-literal": true, "path-prefix": true,
}

func (c *checker) walk(n *node, outbound bool) {
	if n.kind != listNode {
		return
	}
	h := n.head()
	switch {
	case h == "param":
		c.checkParamRef(n)
		return
	case outbound && h == "local":
		c.fail(n.line, "%s in an outbound rule matches every connection", n)
	case pathFilterHeads[h]:
		if len(n.kids) != 2 || n.kids[1].head() != "param" {
			c.fail(n.line, "path filter %s must take a (param ...), not a literal", n)
		}
	}
	for _, k := range n.kids {
		c.walk(k, outbound)
	}
}

func (c *checker) checkParamRef(n *node) {
	if len(n.kids) != 2 || n.kids[1].kind != stringNode {
		c.fail(n.line, "malformed %s", n)
		return
	}
	key := n.kids[1].text
	if _, ok := c.defined[key]; !ok {
		c.fail(n.line, "parameter %q is not defined by the launcher", key)
		return
	}
	c.used[key] = true
	c.refs = append(c.refs, key)
}

func (c *checker) checkUnused(ps []Param) {
	for _, p := range ps {
		if !c.used[p.Key] {
			c.errs = append(c.errs, fmt.Errorf("parameter %s is defined but never referenced", p.Key))
		}
	}
}

func (c *checker) checkSize(textBytes int) {
	total := textBytes
	for _, k := range c.refs {
		total += len(c.defined[k])
	}
	if total > MaxProfileBytes {
		c.errs = append(c.errs, fmt.Errorf("profile is about %d bytes compiled, over %d: too many paths for one Seatbelt profile", total, MaxProfileBytes))
	}
}
