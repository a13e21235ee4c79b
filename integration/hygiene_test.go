//go:build linux

package integration

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestEnvironmentNotLeaked: the caller's environment stays outside except
// the allowlist; --env adds variables.
func TestEnvironmentNotLeaked(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	secret := token("xyz-")
	callerEnv := []string{
		"AGENTRUN_SECRET_TOKEN=" + secret,
		"AWS_SECRET_ACCESS_KEY=" + secret,
		"GITHUB_TOKEN=" + secret,
		"SSH_AUTH_SOCK=/tmp/ssh-" + secret,
		"LD_PRELOAD=/tmp/" + secret + ".so",
		"TERM=xterm-test",
		"TZ=UTC",
	}
	cfg := spawnCfg{ws: ws, env: callerEnv, flags: []string{"--env", "VISIBLE_K=visible-v", "--env", "EMPTY_K="}}

	r := spawn(t, cfg, "/workspace/attacker", "envscan", secret)
	mustBlock(t, r, "find the caller's secret in the environment or /proc/*/environ")

	r = spawn(t, cfg, "env")
	mustExit(t, r, 0, "env")
	if strings.Contains(r.stdout, secret) {
		t.Errorf("SANDBOX ESCAPE: the caller's secret is in the command's environment\n%s", r)
	}
	got := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	allowed := []string{"PATH", "HOME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TERM", "COLORTERM", "NO_COLOR", "TZ", "VISIBLE_K", "EMPTY_K"}
	for k := range got {
		if !slices.Contains(allowed, k) {
			t.Errorf("variable %s reached the command; only the allowlist %v and --env may", k, allowed)
		}
	}
	for k, v := range map[string]string{"VISIBLE_K": "visible-v", "EMPTY_K": "", "TERM": "xterm-test", "TZ": "UTC", "PATH": sandboxPath, "LANG": "C"} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("positive control: %s=%q inside, want %q (present: %v)", k, g, v, ok)
		}
	}
	if h := got["HOME"]; h == "" || strings.HasPrefix(h, "/root") || strings.HasPrefix(h, "/home") {
		t.Errorf("HOME=%q inside; want a sandbox path", h)
	}
}

// TestInheritedFDsNotLeaked: only fds 0-2 reach the command, whatever the
// caller leaves open.
func TestInheritedFDsNotLeaked(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	_, file, secret := hostSecret(t)
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	dir, err := os.Open(filepath.Dir(file))
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	// fds 3, 4, 5, 6 of agentrun: the secret file, a pipe, the secret's
	// directory and the secret file again.
	cfg := spawnCfg{ws: ws, extraFiles: []*os.File{f, pw, dir, f}}

	r := spawn(t, cfg, "/workspace/attacker", "fds")
	mustBlock(t, r, "find inherited fds beyond 0-2")
	for _, fd := range []string{"3", "4", "5", "6", "7"} {
		r := spawn(t, cfg, "/workspace/attacker", "read", "/proc/self/fd/"+fd)
		mustBlock(t, r, "read inherited fd "+fd)
		if strings.Contains(r.stdout, secret) {
			t.Errorf("SANDBOX ESCAPE: the secret file leaked through fd %s", fd)
		}
	}
	r = spawn(t, cfg, "/bin/ls", "/proc/self/fd")
	mustExit(t, r, 0, "ls /proc/self/fd")
	// ls itself holds one directory fd (3) while listing.
	if got := strings.Fields(r.stdout); !slices.Equal(got, []string{"0", "1", "2", "3"}) {
		t.Errorf("/proc/self/fd inside lists %v, want 0 1 2 and ls's own 3", got)
	}
	r = spawn(t, cfg, "/bin/sh", "-c", "cat <&5")
	if strings.Contains(r.stdout, secret) {
		t.Errorf("SANDBOX ESCAPE: the shell read the secret from inherited fd 5\n%s", r)
	}
	// Positive control: stdio is passed through.
	r = spawn(t, cfg, "/bin/sh", "-c", "echo to-stdout; echo to-stderr >&2")
	if strings.TrimSpace(r.stdout) != "to-stdout" || strings.TrimSpace(r.stderr) != "to-stderr" {
		t.Errorf("positive control: stdio not passed through\n%s", r)
	}
}
