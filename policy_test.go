package agentrun

import (
	"strings"
	"testing"
	"time"
)

func TestReadPolicy(t *testing.T) {
	p, err := ReadPolicy(strings.NewReader(`{"workspace":"/w","network":"host","timeout":"30s",
		"limits":{"memory":"512M","pids":64,"fsize":1024},
		"mounts":[{"source":"/a","dest":"/b","mode":"ro"},{"dest":"/t","mode":"tmpfs","size":"16M"}],
		"env":["A=1"],"command":["echo","hi"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Workspace != "/w" || p.Network != NetworkHost || time.Duration(p.Timeout) != 30*time.Second ||
		p.Limits.Memory != 512<<20 || p.Limits.Pids != 64 || p.Limits.FSize != 1024 ||
		len(p.Mounts) != 2 || p.Mounts[1].Size != 16<<20 || p.Command[1] != "hi" {
		t.Errorf("decoded %+v", p)
	}
}

func TestReadPolicyRejects(t *testing.T) {
	for name, in := range map[string]string{
		"unknown field":  `{"workspace":"/w","netwrok":"host"}`,
		"nested unknown": `{"limits":{"memroy":"1G"}}`,
		"trailing":       `{} {}`,
		"bad size":       `{"limits":{"memory":"lots"}}`,
		"negative size":  `{"limits":{"memory":-1}}`,
		"bad duration":   `{"timeout":"soon"}`,
		"number timeout": `{"timeout":30}`,
		"not json":       `workspace: /w`,
	} {
		if _, err := ReadPolicy(strings.NewReader(in)); err == nil {
			t.Errorf("%s: %s accepted", name, in)
		}
	}
}

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{"0": 0, "4096": 4096, "64M": 64 << 20, "1G": 1 << 30, "2k": 2048, "1Gi": 1 << 30, "3MiB": 3 << 20} {
		if got, err := ParseByteSize(in); err != nil || got != want {
			t.Errorf("%q: got %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "M", "-1", "1.5G", "12Q", "99999999999T"} {
		if _, err := ParseByteSize(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func TestEnviron(t *testing.T) {
	p := &Policy{Env: []string{"HOME=/workspace", "X=a=b"}}
	env, err := p.Environ([]string{"PATH=/p", "SSH_AUTH_SOCK=/s", "LANG=C.UTF-8", "GITHUB_TOKEN=t", "junk"})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(env, " ")
	for _, want := range []string{"PATH=/p", "LANG=C.UTF-8", "HOME=/workspace", "X=a=b"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %s in %q", want, got)
		}
	}
	for _, bad := range []string{"SSH_AUTH_SOCK", "GITHUB_TOKEN", "junk", "HOME=/tmp"} {
		if strings.Contains(got, bad) {
			t.Errorf("leaked %s in %q", bad, got)
		}
	}
	env, _ = (&Policy{}).Environ(nil)
	if strings.Join(env, " ") != "PATH="+DefaultPath+" HOME=/tmp" {
		t.Errorf("defaults: %q", env)
	}
}
