//go:build linux && cgo

package seccomp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/abiprobe"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

func mustCompile(t testing.TB, p *specs.LinuxSeccomp) *Program {
	t.Helper()
	prog, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

func mustNotify(t testing.TB, p *specs.LinuxSeccomp) *specs.LinuxSeccomp {
	t.Helper()
	n, err := NotifyOnDeny(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// childCmd prepares the test binary as a filtered child in mode.
func childCmd(t *testing.T, mode string, prog *Program, flags Flags, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "prog.bpf")
	if err := os.WriteFile(path, prog.Filter, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), envMode+"="+mode, envProg+"="+path, fmt.Sprintf("%s=%d", envFlags, flags))
	cmd.Dir = dir
	return cmd
}

// results parses "name<TAB>result..." lines.
func results(out []byte) map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), "\t")
		if ok {
			m[name] = rest
		}
	}
	return m
}

func TestFilterDeniesAndAllows(t *testing.T) {
	prog := mustCompile(t, DefaultProfile())
	out, err := childCmd(t, "probes", prog, prog.Flags).CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	got := results(out)
	for _, p := range probes() {
		r, ok := got[p.name]
		switch {
		case !ok:
			t.Errorf("%s: no result", p.name)
		case p.want == "allowed":
			if r == "EPERM" || r == "ENOSYS" {
				t.Errorf("%s = %s, want it let through", p.name, r)
			}
		case r != p.want:
			t.Errorf("%s = %s, want %s", p.name, r, p.want)
		}
	}
	if t.Failed() {
		t.Logf("child output:\n%s", out)
	}
}

// exitSignal returns the signal that killed a finished command, or 0.
func exitSignal(err error) syscall.Signal {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ws.Signal()
		}
	}
	return 0
}

func TestFilterClosesCompatABIs(t *testing.T) {
	allowAll := func(arches ...specs.Arch) *Program {
		return mustCompile(t, &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Architectures: arches})
	}
	def := mustCompile(t, DefaultProfile())

	t.Run("i386 int 0x80", func(t *testing.T) {
		if !abiprobe.Supported {
			t.Skip("int $0x80 probe exists on amd64 only")
		}
		// Control: with i386 in the program, the gate reaches the kernel.
		ctl := allowAll(specs.ArchX86_64, specs.ArchX86)
		out, err := childCmd(t, "int80", ctl, ctl.Flags).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "int80 returned ") || strings.Contains(string(out), "returned -") {
			t.Fatalf("control: %v %s (is IA32 emulation enabled?)", err, out)
		}
		out, err = childCmd(t, "int80", def, def.Flags).CombinedOutput()
		if sig := exitSignal(err); sig != syscall.SIGSYS {
			t.Fatalf("default profile: int 0x80 gave %v %q, want death by SIGSYS", err, out)
		}
	})
	t.Run("x32", func(t *testing.T) {
		if !abiprobe.Supported {
			t.Skip("x32 exists on amd64 only")
		}
		ctl := allowAll(specs.ArchX86_64, specs.ArchX32)
		out, err := childCmd(t, "x32", ctl, ctl.Flags).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "x32 returned ") {
			t.Fatalf("control: %v %s", err, out)
		}
		t.Logf("control (x32 in the program): %s", bytes.TrimSpace(out))
		out, err = childCmd(t, "x32", def, def.Flags).CombinedOutput()
		if sig := exitSignal(err); sig != syscall.SIGSYS {
			t.Fatalf("default profile: x32 syscall gave %v %q, want death by SIGSYS", err, out)
		}
	})
}

// toolEnv is the environment commands run with under the filter.
func toolEnv(t *testing.T, home string) []string {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = filepath.Join(home, ".cache")
	}
	return []string{
		"PATH=/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin",
		"HOME=" + home,
		"LANG=C.UTF-8",
		"GOCACHE=" + filepath.Join(cache, "go-build"),
		"GOTOOLCHAIN=local",
		"GOPROXY=off",
		"GOFLAGS=",
		"GIT_CONFIG_NOSYSTEM=1",
	}
}

func TestFilterRunsEverydayTools(t *testing.T) {
	prog := mustCompile(t, DefaultProfile())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "curl ok")
	}))
	defer srv.Close()

	cases := []struct {
		name, tool, script, want string
		slow                     bool
	}{
		{"shell", "sh", `echo hi`, "hi", false},
		{"filter inherited", "sh", `grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status | tr -d '\t\n'`, "NoNewPrivs:1Seccomp:2", false},
		{"coreutils", "sh", `mkdir d && echo x > d/f && cp d/f d/g && ls d | sort | tr '\n' ' ' && rm -r d && date +%Y >/dev/null && echo done`, "f g done", false},
		{"pipeline and job control", "sh", `(sleep 0.1 & wait) ; seq 1 1000 | sort -n | tail -1`, "1000", false},
		{"git", "git", `git init -q repo && cd repo && echo hi > f && git add f && git -c user.name=t -c user.email=t@example.com commit -qm first && git log --oneline | wc -l`, "1", false},
		{"python3", "python3", `python3 -c 'import subprocess, threading, socket, os
t = threading.Thread(target=lambda: None); t.start(); t.join()
socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
print(subprocess.run(["echo", "py"], capture_output=True, text=True).stdout.strip(), os.cpu_count() > 0)'`, "py True", false},
		{"cc", "cc", `printf '#include <stdio.h>\n#include <pthread.h>\nstatic void *f(void *a){return a;}\nint main(void){pthread_t t; pthread_create(&t,0,f,0); pthread_join(t,0); puts("cc ok"); return 0;}\n' > h.c && cc -pthread -o h h.c && ./h`, "cc ok", false},
		{"make", "make", `printf 'all:\n\t@echo make ok\n' > Makefile && make -s`, "make ok", false},
		{"node", "node", `node -e 'require("child_process").execSync("true"); require("fs").writeFileSync("n.txt", "x"); console.log("node ok")'`, "node ok", false},
		{"curl (host network)", "curl", `curl -sS ` + srv.URL + `/`, "curl ok", false},
		{"go build", "go", `mkdir m && cd m && printf 'module m\ngo 1.21\n' > go.mod && printf 'package main\nimport ("fmt"; "os/exec")\nfunc main(){ out, _ := exec.Command("echo", "go").Output(); fmt.Print(string(out)[:2], " ok") }\n' > main.go && go build -o app . && ./app`, "go ok", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := exec.LookPath(c.tool); err != nil {
				if _, err2 := os.Stat("/usr/local/go/bin/" + c.tool); err2 != nil {
					t.Skipf("%s not installed", c.tool)
				}
			}
			if c.slow && testing.Short() {
				t.Skip("slow")
			}
			cmd := childCmd(t, "spawn", prog, prog.Flags, "/bin/sh", "-c", c.script)
			cmd.Env = append(cmd.Env, toolEnv(t, cmd.Dir)...)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), c.want) {
				t.Fatalf("%v; output:\n%s\nwant %q", err, out, c.want)
			}
		})
	}

	t.Run("exec in place", func(t *testing.T) {
		cmd := childCmd(t, "exec", prog, prog.Flags, "/bin/sh", "-c", `grep '^Seccomp:' /proc/self/status | tr -d '\t\n'; echo; exit 7`)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 7 || !strings.Contains(string(out), "Seccomp:2") {
			t.Fatalf("%v %q", err, out)
		}
	})

	t.Run("nested user namespace", func(t *testing.T) {
		if _, err := exec.LookPath("unshare"); err != nil {
			t.Skip("unshare(1) not installed")
		}
		cmd := childCmd(t, "spawn", prog, prog.Flags, "unshare", "-U", "true")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "Operation not permitted") {
			t.Fatalf("unshare -U under the filter: %v %q, want failure with EPERM", err, out)
		}
	})
}

// startNotified runs the child in a notify mode and serves its listener.
func startNotified(t *testing.T, mode string, prog *Program, flags Flags, args ...string) (*Notifier, []byte, *[]Event) {
	t.Helper()
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	parentEnd := os.NewFile(uintptr(sp[0]), "parent")
	childEnd := os.NewFile(uintptr(sp[1]), "child")
	defer parentEnd.Close()
	cmd := childCmd(t, mode, prog, flags, args...)
	cmd.ExtraFiles = []*os.File{childEnd}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	childEnd.Close()

	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(sp[0], buf, oob, 0)
	if err != nil {
		cmd.Wait()
		t.Fatalf("recvmsg: %v; child: %s", err, out.Bytes())
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("control message: %v", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("rights: %v", err)
	}
	var seen []Event
	n, err := NewNotifier(fds[0], prog, func(e Event) { seen = append(seen, e) })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parentEnd.Write([]byte{'A'}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, out.Bytes())
	}
	select {
	case <-n.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("notifier did not stop after the sandbox exited")
	}
	if err := n.Close(); err != nil {
		t.Fatalf("notifier: %v", err)
	}
	return n, out.Bytes(), &seen
}

func TestNotifierReportsDenials(t *testing.T) {
	prog := mustCompile(t, mustNotify(t, DefaultProfile()))
	if !prog.NeedsListener() {
		t.Fatal("NotifyOnDeny program does not ask for a listener")
	}
	var args []string
	if _, err := exec.LookPath("unshare"); err == nil {
		args = []string{"unshare", "-U", "true"}
	}
	n, out, seen := startNotified(t, "notify", prog, prog.Flags, args...)
	got := results(out)
	for name, want := range map[string]string{
		"keyctl": "EPERM", "socket(AF_PACKET)": "EPERM", "seccomp(NEW_LISTENER)": "EPERM", "getpid": "0",
	} {
		if got[name] != want {
			t.Errorf("%s = %q, want %s", name, got[name], want)
		}
	}
	if args != nil && !strings.Contains(got["command"], "Operation not permitted") {
		t.Errorf("unshare -U: %s", got["command"])
	}

	events := n.Events()
	find := func(name, detail string) *Event {
		for i := range events {
			if events[i].Name == name && events[i].Detail == detail {
				return &events[i]
			}
		}
		return nil
	}
	want := []struct {
		name, detail string
		count        int
	}{
		{"keyctl", "", 2},
		{"socket", "family=AF_PACKET", 1},
		{"seccomp", "flags=SECCOMP_FILTER_FLAG_NEW_LISTENER", 1},
	}
	if args != nil {
		want = append(want, struct {
			name, detail string
			count        int
		}{"unshare", "flags=CLONE_NEWUSER", 1})
	}
	for _, w := range want {
		e := find(w.name, w.detail)
		if e == nil {
			t.Errorf("no event %s %q; events: %+v", w.name, w.detail, events)
			continue
		}
		if e.Count != w.count || e.Suggestion == "" || e.PID <= 0 {
			t.Errorf("event %+v: want count %d, a suggestion and a pid", *e, w.count)
		}
	}
	if len(events) != len(want) {
		t.Errorf("%d events, want %d: %+v", len(events), len(want), events)
	}
	if len(*seen) != len(events) {
		t.Errorf("onEvent called %d times for %d events", len(*seen), len(events))
	}
	for _, e := range events {
		t.Logf("%s", e)
	}
}

func TestNotifierUnderLoad(t *testing.T) {
	prog := mustCompile(t, mustNotify(t, DefaultProfile()))
	n, out, _ := startNotified(t, "notify-storm", prog, prog.Flags|FlagTSync)
	got := results(out)
	if got["EPERM"] != "800" || len(got) != 1 {
		t.Fatalf("16 threads x 50 keyctl: %v", got)
	}
	events := n.Events()
	if len(events) != 1 || events[0].Name != "keyctl" || events[0].Count != 800 {
		t.Fatalf("events %+v", events)
	}
}

func TestDeniedWhenListenerGone(t *testing.T) {
	prog := mustCompile(t, mustNotify(t, DefaultProfile()))
	for _, flags := range []Flags{prog.Flags, prog.Flags | FlagWaitKillableRecv} {
		out, err := childCmd(t, "notify-closed", prog, flags).CombinedOutput()
		if err != nil {
			t.Fatalf("flags %#x: child: %v\n%s", flags, err, out)
		}
		got := results(out)
		// The kernel answers a notifying rule without a listener with
		// ENOSYS: the call is still refused.
		for name, want := range map[string]string{
			"keyctl": "ENOSYS", "socket(AF_PACKET)": "ENOSYS", "seccomp(NEW_LISTENER)": "ENOSYS", "getpid": "0",
		} {
			if got[name] != want {
				t.Errorf("flags %#x: %s = %q, want %s", flags, name, got[name], want)
			}
		}
	}
}

// TestNestedListenerGuard shows why NotifyOnDeny denies seccomp(2) with
// NEW_LISTENER: without that rule, a command whose parent listener is gone
// can stack its own notifying filter, which wins the tie between equal
// actions, and let a denied call run.
func TestNestedListenerGuard(t *testing.T) {
	nested := mustCompile(t, &specs.LinuxSeccomp{DefaultAction: specs.ActAllow,
		Syscalls: []specs.LinuxSyscall{{Names: []string{"keyctl"}, Action: specs.ActNotify}}})
	nestedPath := filepath.Join(t.TempDir(), "nested.bpf")
	if err := os.WriteFile(nestedPath, nested.Filter, 0o644); err != nil {
		t.Fatal(err)
	}
	// The ablated profile: reporting, but seccomp allowed outright.
	unguarded := mustNotify(t, DefaultProfile())
	kept := unguarded.Syscalls[:0]
	for _, sc := range unguarded.Syscalls {
		if !contains(sc.Names, "seccomp") {
			kept = append(kept, sc)
		}
	}
	unguarded.Syscalls = append(kept, specs.LinuxSyscall{Names: []string{"seccomp"}, Action: specs.ActAllow})

	run := func(t *testing.T, p *specs.LinuxSeccomp, mode string) map[string]string {
		prog := mustCompile(t, p)
		cmd := childCmd(t, mode, prog, prog.Flags)
		cmd.Env = append(cmd.Env, envProg2+"="+nestedPath)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		t.Logf("%s", bytes.TrimSpace(out))
		return results(out)
	}
	t.Run("unguarded, listener gone: the call escapes", func(t *testing.T) {
		got := run(t, unguarded, "shadow")
		if got["nested load"] != "ok" || !strings.HasPrefix(got["keyctl"], "0\t") {
			t.Fatalf("expected the kernel to let the nested listener decide: %v", got)
		}
	})
	t.Run("unguarded, listener open: the kernel refuses a second listener", func(t *testing.T) {
		got := run(t, unguarded, "shadow-open")
		if !strings.Contains(got["nested load"], "already in force") {
			t.Fatalf("nested load = %q, want ErrListenerBusy", got["nested load"])
		}
	})
	t.Run("guarded, listener gone: still denied", func(t *testing.T) {
		got := run(t, mustNotify(t, DefaultProfile()), "shadow")
		if !strings.Contains(got["nested load"], "function not implemented") {
			t.Fatalf("nested load = %q, want ENOSYS", got["nested load"])
		}
	})
}

func TestTSync(t *testing.T) {
	prog := mustCompile(t, DefaultProfile())
	for _, c := range []struct {
		flags    Flags
		filtered bool
	}{{0, false}, {FlagTSync, true}} {
		out, err := childCmd(t, "tsync", prog, c.flags).CombinedOutput()
		if err != nil {
			t.Fatalf("flags %#x: %v\n%s", c.flags, err, out)
		}
		r := results(out)["other thread keyctl"]
		if (r == "EPERM") != c.filtered {
			t.Errorf("flags %#x: keyctl on another thread = %s, filtered want %v", c.flags, r, c.filtered)
		}
	}
	// TSYNC together with a listener needs TSYNC_ESRCH, which Load adds.
	nprog := mustCompile(t, mustNotify(t, DefaultProfile()))
	out, err := childCmd(t, "notify-closed", nprog, nprog.Flags|FlagTSync).CombinedOutput()
	if err != nil || results(out)["keyctl"] != "ENOSYS" {
		t.Fatalf("TSYNC with a listener: %v\n%s", err, out)
	}
}

func TestLoadDoesNotAllocate(t *testing.T) {
	// One instruction: BPF_RET|BPF_K SECCOMP_RET_ALLOW.
	allow := &Program{Filter: []byte{0x06, 0, 0, 0, 0x00, 0x00, 0xff, 0x7f}}
	out, err := childCmd(t, "allocs", allow, 0).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.TrimSpace(string(out)) != "allocs 0" {
		t.Fatalf("Load allocates: %s", out)
	}
}

func TestLoadErrors(t *testing.T) {
	for _, b := range [][]byte{nil, make([]byte, 7), make([]byte, 8*(maxInstructions+1))} {
		if _, err := Load(b, 0); !errors.Is(err, ErrInvalidProgram) {
			t.Errorf("Load(%d bytes) = %v, want ErrInvalidProgram", len(b), err)
		}
	}
	if os.Geteuid() == 0 {
		t.Log("no_new_privs check skipped: root may load filters without it")
		return
	}
	prog := mustCompile(t, DefaultProfile())
	out, err := childCmd(t, "no-nnp", prog, 0).CombinedOutput()
	if err != nil || !strings.Contains(string(out), ErrNoNewPrivs.Error()) {
		t.Fatalf("load without no_new_privs: %v %s", err, out)
	}
}
