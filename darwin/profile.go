package darwin

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Param is one -D KEY=VALUE definition passed to sandbox-exec.
type Param struct {
	Key   string
	Value string
}

// Profile is a compiled Seatbelt profile: the SBPL text and the parameters
// it references. The text embeds no host path; every path is a Param.
type Profile struct {
	Text   string
	Params []Param
	// Tag is the message every denial of the run carries in the log.
	Tag string
	// Warnings are one-line notes on where the profile is weaker or
	// different than the request (an explicit grant inside a secret).
	Warnings []string
}

// grant is a host subtree the sandbox may use.
type grant struct {
	path     string
	writable bool
	// explicit grants were asked for (workspace, mounts); they win over the
	// secret denies, the implicit per-run directories never need to.
	explicit bool
}

// plan is a Spec after canonicalization: every path as Seatbelt sees it.
type plan struct {
	spec      Spec
	grants    []grant
	temps     []string
	terminals []string
	extraSys  []string
	secrets   []string
}

// Compile turns a Spec into a checked profile. It is pure apart from the
// Resolver it is given, so the same Spec and Resolver give the same bytes.
func Compile(s Spec, resolve Resolver) (*Profile, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	pl, err := newPlan(s, resolve)
	if err != nil {
		return nil, err
	}
	b := newBuilder(s.Tag)
	b.emitBase()
	b.emitFiles(pl)
	b.emitNetwork(pl)
	b.emitSecrets(pl)
	p := b.profile()
	if err := Check(p); err != nil {
		return nil, fmt.Errorf("darwin: generated profile failed its structural check: %w", err)
	}
	return p, nil
}

func newPlan(s Spec, resolve Resolver) (*plan, error) {
	pl := &plan{spec: s}
	canon := func(what, p string) (string, error) {
		c, err := resolve(p)
		if err != nil {
			return "", fmt.Errorf("darwin: %s %s: %w", what, p, err)
		}
		if err := checkHostPath(what, c); err != nil {
			return "", err
		}
		return path.Clean(c), nil
	}
	var err error
	if pl.temps, err = canonAll(canon, "temporary directory", s.TempDirs); err != nil {
		return nil, err
	}
	if pl.terminals, err = canonAll(canon, "terminal", s.Terminals); err != nil {
		return nil, err
	}
	if pl.extraSys, err = canonAll(canon, "system path", s.ExtraSystemRead); err != nil {
		return nil, err
	}
	if pl.grants, err = planGrants(s, pl.temps, canon); err != nil {
		return nil, err
	}
	if pl.secrets, err = planSecrets(s.Home, canon); err != nil {
		return nil, err
	}
	return pl, nil
}

func canonAll(canon func(string, string) (string, error), what string, in []string) ([]string, error) {
	out := make([]string, 0, len(in))
	for _, p := range in {
		c, err := canon(what, p)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// planGrants orders grants shallow to deep. Seatbelt lets the last matching
// rule win, so a deeper grant overrides a shallower one exactly as a nested
// bind mount would on Linux (a read-only mount inside the workspace stays
// read-only).
func planGrants(s Spec, temps []string, canon func(string, string) (string, error)) ([]grant, error) {
	ws, err := canon("workspace", s.Workspace)
	if err != nil {
		return nil, err
	}
	if ws == "/" {
		return nil, fmt.Errorf("darwin: workspace %s resolves to /", s.Workspace)
	}
	gs := []grant{{path: ws, writable: true, explicit: true}}
	for _, t := range temps {
		gs = append(gs, grant{path: t, writable: true})
	}
	for _, m := range s.Mounts {
		c, err := canon("mount", m.Path)
		if err != nil {
			return nil, err
		}
		gs = append(gs, grant{path: c, writable: m.Writable, explicit: true})
	}
	sort.SliceStable(gs, func(i, j int) bool { return depth(gs[i].path) < depth(gs[j].path) })
	return gs, nil
}

// planSecrets lists every spelling of every secret: as written, as
// resolved (a ~/.ssh that links into a dotfiles repository), and through
// the data volume.
func planSecrets(home string, canon func(string, string) (string, error)) ([]string, error) {
	var raw []string
	if home != "" {
		h := path.Clean(home)
		for _, rel := range homeSecrets {
			raw = append(raw, path.Join(h, rel))
		}
	}
	raw = append(raw, systemSecrets[:]...)
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, r := range raw {
		c, err := canon("secret", r)
		if err != nil {
			return nil, err
		}
		for _, sp := range []string{r, c} {
			add(sp)
			if !within(sp, "/System") {
				add(dataVolume + sp)
			}
		}
	}
	return out, nil
}

// MaxFiltersPerRule bounds one rule. The SBPL compiler has a 64 KiB limit
// per compiled object; long path lists are split over several identical
// rules instead of growing one.
const MaxFiltersPerRule = 32

type builder struct {
	tag    string
	text   strings.Builder
	params []Param
	keys   map[string]string
	counts map[string]int
	warns  []string
}

func newBuilder(tag string) *builder {
	return &builder{tag: tag, keys: map[string]string{}, counts: map[string]int{}}
}

func (b *builder) profile() *Profile {
	return &Profile{Text: b.text.String(), Params: b.params, Tag: b.tag, Warnings: b.warns}
}

// param returns the (param "KEY") expression for value, defining KEY on
// first use. Keys are ROLE_N so the text shows what each path is for.
func (b *builder) param(role, value string) string {
	id := role + "\x00" + value
	key, ok := b.keys[id]
	if !ok {
		key = role + "_" + strconv.Itoa(b.counts[role])
		b.counts[role]++
		b.keys[id] = key
		b.params = append(b.params, Param{Key: key, Value: value})
	}
	return `(param "` + key + `")`
}

// pathFilters renders one filter of kind (subpath, literal) per path.
func (b *builder) pathFilters(kind, role string, paths []string) []string {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		out = append(out, "("+kind+" "+b.param(role, p)+")")
	}
	return out
}

func (b *builder) comment(text string) {
	b.text.WriteString("\n; " + text + "\n")
}

func (b *builder) line(s string) {
	b.text.WriteString(s + "\n")
}

// rule writes "(action ops filters...)" split into chunks of at most
// MaxFiltersPerRule filters. Nothing is written for no filters: an empty
// filter list would match everything. tagged rules carry the run's message
// so their denials are found in the log.
func (b *builder) rule(action, ops string, filters []string, tagged bool) {
	for len(filters) > 0 {
		n := min(len(filters), MaxFiltersPerRule)
		b.text.WriteString("(" + action + " " + ops)
		for _, f := range filters[:n] {
			b.text.WriteString("\n  " + f)
		}
		if tagged {
			b.text.WriteString("\n  " + b.withMessage())
		}
		b.text.WriteString(")\n")
		filters = filters[n:]
	}
}

func (b *builder) withMessage() string {
	return `(with message "` + b.tag + `")`
}

func quoted(kind string, values []string) []string {
	out := make([]string, 0, len(values))
	for _, v := range values {
		out = append(out, "("+kind+` "`+v+`")`)
	}
	return out
}
