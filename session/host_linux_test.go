//go:build linux

package session_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/seccomp"
	"github.com/agentrun/agentrun/session"
	"golang.org/x/sys/unix"
)

// TestExecStdioAndExitCodes: stdout and stderr apart or on one pipe, the
// exit status of a normal end, a command not found or not executable and
// a signal, and a cwd that does not exist, after which the session still
// serves.
func TestExecStdioAndExitCodes(t *testing.T) {
	s := open(t, opts{})

	r := s.run(t, session.ExecRequest{Shell: "echo out; echo err >&2; echo out2"})
	if r.Code != 0 || r.out != "out\nout2\n" || r.err != "err\n" {
		t.Errorf("separate streams: %+v out %q err %q", r.ExitInfo, r.out, r.err)
	}
	// One writer for both is one pipe: the order of the writes is kept.
	var b bytes.Buffer
	r = s.run(t, session.ExecRequest{
		Shell:  `echo a; echo b >&2; echo c; [ "$(readlink /proc/$$/fd/1)" = "$(readlink /proc/$$/fd/2)" ] && echo one-pipe >&2`,
		Stdout: &b, Stderr: &b,
	})
	if r.Code != 0 || b.String() != "a\nb\nc\none-pipe\n" {
		t.Errorf("merged streams: %+v %q", r.ExitInfo, b.String())
	}
	// nil is /dev/null.
	info, out := s.sh(t, "echo x > /dev/null; readlink /proc/$$/fd/0")
	if info.Code != 0 || out != "/dev/null\n" {
		t.Errorf("stdin of an exec without one: %+v %q", info, out)
	}

	if err := os.WriteFile(filepath.Join(s.ws, "notexec"), []byte("#!/bin/sh\necho ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		r    session.ExecRequest
		code int
		sig  int
	}{
		{"exit 0", session.ExecRequest{Args: []string{"true"}}, 0, 0},
		{"exit 7", session.ExecRequest{Shell: "exit 7"}, 7, 0},
		{"not found", session.ExecRequest{Args: []string{"agentrun-no-such-command"}}, 127, 0},
		{"not found by path", session.ExecRequest{Args: []string{"/no/such/file"}}, 127, 0},
		{"not executable", session.ExecRequest{Args: []string{"/workspace/notexec"}}, 126, 0},
		{"not executable, relative", session.ExecRequest{Args: []string{"./notexec"}}, 126, 0},
		{"kill -9 $$", session.ExecRequest{Shell: "kill -9 $$"}, 128 + 9, 9},
		{"kill -TERM $$", session.ExecRequest{Shell: "kill -TERM $$"}, 128 + 15, 15},
	} {
		r := s.run(t, c.r)
		if r.Code != c.code || r.Signal != c.sig || r.TimedOut || r.Aborted || r.Error != "" {
			t.Errorf("%s: %+v (out %q err %q), want code %d signal %d", c.name, r.ExitInfo, r.out, r.err, c.code, c.sig)
		}
	}

	// A cwd that does not exist is the init's refusal, not a process.
	_, err := s.Exec(context.Background(), session.ExecRequest{Args: []string{"true"}, Cwd: "/no/such/dir"})
	if errKind(err) != session.KindRuntime {
		t.Errorf("exec in a missing cwd: %v (kind %q), want a *session.Error of kind %q", err, errKind(err), session.KindRuntime)
	}
	if info, out := s.sh(t, "mkdir -p /workspace/sub && echo ok"); info.Code != 0 || out != "ok\n" {
		t.Fatalf("the session after a failed exec: %+v %q", info, out)
	}
	// A relative cwd is the session's cwd's.
	if r := s.run(t, session.ExecRequest{Args: []string{"pwd"}, Cwd: "sub"}); r.Code != 0 || r.out != "/workspace/sub\n" {
		t.Errorf("relative cwd: %+v %q", r.ExitInfo, r.out)
	}
	if r := s.run(t, session.ExecRequest{Args: []string{"pwd"}, Cwd: "/tmp"}); r.Code != 0 || r.out != "/tmp\n" {
		t.Errorf("cwd /tmp: %+v %q", r.ExitInfo, r.out)
	}
	// Neither args nor shell, or both: refused before anything runs.
	for _, r := range []session.ExecRequest{{}, {Args: []string{""}}, {Args: []string{"true"}, Shell: "true"}} {
		if _, err := s.Exec(context.Background(), r); errKind(err) != session.KindProtocol {
			t.Errorf("exec %+v: %v, want a protocol error", r, err)
		}
	}
	if st := s.State(); len(st.Processes) != 0 {
		t.Errorf("processes left after waited execs: %+v", st.Processes)
	}
}

// TestExecEnvironment: an exec sees the session's environment with its
// own entries over it, never an earlier exec's; ReplaceEnv gives exactly
// the entries given; a malformed entry is a protocol error.
func TestExecEnvironment(t *testing.T) {
	s := open(t, opts{})
	base := s.Spec().Process.Env
	if len(base) == 0 {
		t.Fatal("the session has no environment")
	}

	if info, out := s.sh(t, "export FOO=1; echo ${FOO}"); info.Code != 0 || out != "1\n" {
		t.Fatalf("export: %+v %q", info, out)
	}
	if info, out := s.sh(t, "echo ${FOO-unset}"); info.Code != 0 || out != "unset\n" {
		t.Errorf("an earlier exec's export is seen: %+v %q", info, out)
	}

	// Env entries override the session's and add to them.
	r := s.run(t, session.ExecRequest{Args: []string{"/usr/bin/env"}, Env: []string{"LANG=xx_XX.UTF-8", "FOO=bar=baz", "EMPTY="}})
	got := strings.Split(strings.TrimSuffix(r.out, "\n"), "\n")
	var want []string
	for _, kv := range base {
		if !strings.HasPrefix(kv, "LANG=") {
			want = append(want, kv)
		}
	}
	want = append(want, "LANG=xx_XX.UTF-8", "FOO=bar=baz", "EMPTY=")
	slices.Sort(got)
	slices.Sort(want)
	if r.Code != 0 || !slices.Equal(got, want) {
		t.Errorf("Env over the session's:\n got %q\nwant %q", got, want)
	}
	// The session's environment is untouched by that.
	r = s.run(t, session.ExecRequest{Args: []string{"/usr/bin/env"}})
	got = strings.Split(strings.TrimSuffix(r.out, "\n"), "\n")
	want = slices.Clone(base)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the session's environment after an override:\n got %q\nwant %q", got, want)
	}

	r = s.run(t, session.ExecRequest{Args: []string{"/usr/bin/env"}, Env: []string{"ONLY=1", "X=y"}, ReplaceEnv: true})
	if r.Code != 0 || r.out != "ONLY=1\nX=y\n" {
		t.Errorf("ReplaceEnv: %+v %q", r.ExitInfo, r.out)
	}
	r = s.run(t, session.ExecRequest{Args: []string{"/usr/bin/env"}, ReplaceEnv: true})
	if r.Code != 0 || r.out != "" {
		t.Errorf("ReplaceEnv with nothing: %+v %q", r.ExitInfo, r.out)
	}

	for _, bad := range []string{"NOEQUALS", "=value", "A=b\x00c"} {
		_, err := s.Exec(context.Background(), session.ExecRequest{Args: []string{"true"}, Env: []string{"OK=1", bad}})
		if errKind(err) != session.KindProtocol {
			t.Errorf("env entry %q: %v, want a protocol error", bad, err)
		}
		_, err = s.Exec(context.Background(), session.ExecRequest{Args: []string{"true"}, Env: []string{bad}, ReplaceEnv: true})
		if errKind(err) != session.KindProtocol {
			t.Errorf("env entry %q with ReplaceEnv: %v, want a protocol error", bad, err)
		}
	}
	if info, out := s.sh(t, "echo still"); info.Code != 0 || out != "still\n" {
		t.Errorf("the session after refused execs: %+v %q", info, out)
	}
}

// TestStateAcrossExecs: files in /tmp and background processes outlive
// the exec that made them.
func TestStateAcrossExecs(t *testing.T) {
	s := open(t, opts{})
	m := marker(1000)
	info, out := s.sh(t, "echo kept > /tmp/kept; sleep "+m+" >/dev/null 2>&1 & echo started")
	if info.Code != 0 || out != "started\n" {
		t.Fatalf("first exec: %+v %q", info, out)
	}
	if info.DurationMS > 2000 {
		t.Errorf("an exec whose background child holds no pipe took %.0f ms", info.DurationMS)
	}
	if info, out := s.sh(t, "cat /tmp/kept"); info.Code != 0 || out != "kept\n" {
		t.Errorf("/tmp across execs: %+v %q", info, out)
	}
	// pgrep run directly matches neither itself nor a shell.
	r := s.run(t, session.ExecRequest{Args: []string{"pgrep", "-x", "-f", "sleep " + m}})
	if r.Code != 0 || len(strings.Fields(r.out)) != 1 {
		t.Errorf("the background sleep seen from a later exec: %+v %q %q", r.ExitInfo, r.out, r.err)
	}
	if pids := procsWith(m); len(pids) != 1 {
		t.Errorf("host processes of the background sleep: %v", pids)
	}
	if st := s.State(); len(st.Processes) != 0 {
		t.Errorf("the session lists processes of ended execs: %+v", st.Processes)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !eventually(2*time.Second, func() bool { return len(procsWith(m)) == 0 }) {
		t.Errorf("the background sleep outlived the session: %v", procsWith(m))
	}
}

// TestTimeoutAndCancel: a timeout and a cancelled context each kill the
// exec's process group, children included, and nothing else; the result
// says which ended it.
func TestTimeoutAndCancel(t *testing.T) {
	s := open(t, opts{})
	earlier := marker(1000)
	if info, _ := s.sh(t, "sleep "+earlier+" >/dev/null 2>&1 &"); info.Code != 0 {
		t.Fatalf("background sleep: %+v", info)
	}

	for _, mode := range []string{"timeout", "cancel"} {
		child, main := marker(101), marker(100)
		r := session.ExecRequest{Shell: "sleep " + child + " & sleep " + main, Stdout: io.Discard}
		ctx := context.Background()
		if mode == "timeout" {
			r.Timeout = 300 * time.Millisecond
		} else {
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			time.AfterFunc(300*time.Millisecond, cancel)
			defer cancel()
		}
		start := time.Now()
		p, err := s.Exec(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		info := p.Wait()
		took := time.Since(start)
		switch mode {
		case "timeout":
			if !info.TimedOut || info.Aborted || info.Code != 124 {
				t.Errorf("timeout: %+v, want TimedOut, code 124, not Aborted", info)
			}
		case "cancel":
			if info.TimedOut || !info.Aborted || info.Code != 128+9 || info.Signal != 9 {
				t.Errorf("cancel: %+v, want Aborted, code 137, not TimedOut", info)
			}
		}
		if took < 250*time.Millisecond || took > 3*time.Second {
			t.Errorf("%s: the exec ended after %v, want about 300ms", mode, took)
		}
		for _, m := range []string{child, main} {
			if !eventually(2*time.Second, func() bool { return len(procsWith(m)) == 0 }) {
				t.Errorf("%s: sleep %s of the killed group is left: %v", mode, m, procsWith(m))
			}
		}
		if len(procsWith(earlier)) != 1 {
			t.Errorf("%s: the earlier exec's background sleep was killed", mode)
		}
	}
	// A context cancelled before Exec starts nothing.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Exec(ctx, session.ExecRequest{Args: []string{"true"}}); !errors.Is(err, context.Canceled) {
		t.Errorf("Exec with a cancelled context: %v", err)
	}
	// A timeout that does not fire says nothing.
	r := s.run(t, session.ExecRequest{Shell: "exit 3", Timeout: 5 * time.Second})
	if r.Code != 3 || r.TimedOut || r.Aborted {
		t.Errorf("an exec within its timeout: %+v", r.ExitInfo)
	}
}

// TestMaxOutput: the output past the cap is read and dropped; the
// process is not blocked on a full pipe.
func TestMaxOutput(t *testing.T) {
	s := open(t, opts{})
	start := time.Now()
	r := s.run(t, session.ExecRequest{Shell: "head -c 1000000 /dev/zero; echo e >&2", MaxOutput: 1000})
	if r.Code != 0 || len(r.out) != 1000 || strings.Trim(r.out, "\x00") != "" || !r.StdoutTruncated || r.StderrTruncated || r.err != "e\n" {
		t.Errorf("MaxOutput 1000: %+v, %d bytes out, err %q", r.ExitInfo, len(r.out), r.err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("a capped exec took %v", time.Since(start))
	}
	// Exactly at the cap is not cut.
	r = s.run(t, session.ExecRequest{Shell: "head -c 1000 /dev/zero", MaxOutput: 1000})
	if r.Code != 0 || len(r.out) != 1000 || r.StdoutTruncated {
		t.Errorf("output of exactly MaxOutput: %+v, %d bytes", r.ExitInfo, len(r.out))
	}
	// The cap is per stream, on each stream of one pipe as a whole.
	r = s.run(t, session.ExecRequest{Shell: "head -c 3000 /dev/zero >&2", MaxOutput: 1000})
	if r.Code != 0 || len(r.err) != 1000 || !r.StderrTruncated || r.StdoutTruncated {
		t.Errorf("MaxOutput on stderr: %+v, %d bytes", r.ExitInfo, len(r.err))
	}
}

// TestWaitDelay: a background child that keeps the exec's stdout open
// holds its result for the wait delay only.
func TestWaitDelay(t *testing.T) {
	s := open(t, opts{})
	m := marker(30)
	start := time.Now()
	r := s.run(t, session.ExecRequest{Shell: "sleep " + m + " & echo hi"})
	took := time.Since(start)
	if r.Code != 0 || r.out != "hi\n" {
		t.Errorf("exec with a background child on its stdout: %+v %q", r.ExitInfo, r.out)
	}
	if took > 1500*time.Millisecond || took < session.DefaultWaitDelay {
		t.Errorf("the exec's result came after %v, want the default wait delay (%v) and not much more", took, session.DefaultWaitDelay)
	}
	if len(procsWith(m)) != 1 {
		t.Errorf("the background child was killed with the exec: %v", procsWith(m))
	}
	// A background child that writes without end: the copy stops at the
	// delay, and the child dies on its next write (SIGPIPE).
	w := &hashWriter{h: sha256.New()}
	start = time.Now()
	r = s.run(t, session.ExecRequest{Shell: "yes & sleep 0.1", Stdout: w, WaitDelay: 50 * time.Millisecond})
	if took := time.Since(start); r.Code != 0 || took > 2*time.Second || w.n == 0 {
		t.Errorf("exec with a background writer: %+v after %v, %d bytes", r.ExitInfo, took, w.n)
	}
	if r := s.run(t, session.ExecRequest{Args: []string{"pgrep", "-x", "yes"}}); r.Code != 1 {
		if !eventually(2*time.Second, func() bool { return s.run(t, session.ExecRequest{Args: []string{"pgrep", "-x", "yes"}}).Code == 1 }) {
			t.Errorf("the background writer runs on after its pipe was closed")
		}
	}
	// A longer delay of its own.
	start = time.Now()
	r = s.run(t, session.ExecRequest{Shell: "sleep " + marker(30) + " & echo hi", WaitDelay: 700 * time.Millisecond})
	if took := time.Since(start); r.out != "hi\n" || took < 700*time.Millisecond || took > 2*time.Second {
		t.Errorf("WaitDelay 700ms: %+v %q after %v", r.ExitInfo, r.out, took)
	}
}

// hashWriter hashes and counts what is written to it, slowly if asked.
type hashWriter struct {
	h     hash.Hash
	n     int64
	delay time.Duration
}

func (w *hashWriter) Write(b []byte) (int, error) {
	if w.delay > 0 {
		time.Sleep(w.delay)
	}
	w.n += int64(len(b))
	return w.h.Write(b)
}

// TestBigOutput: 100 MB of random bytes through a pipe arrive exactly;
// the output of a process that ends while it is still being read is
// complete.
func TestBigOutput(t *testing.T) {
	s := open(t, opts{})
	const size = 100_000_000
	w := &hashWriter{h: sha256.New()}
	r := s.run(t, session.ExecRequest{Shell: fmt.Sprintf("head -c %d /dev/urandom | tee /tmp/f", size), Stdout: w})
	if r.Code != 0 || r.err != "" || w.n != size {
		t.Fatalf("100 MB: %+v, %d bytes, stderr %q", r.ExitInfo, w.n, r.err)
	}
	info, out := s.sh(t, "sha256sum < /tmp/f; rm /tmp/f")
	if sum := hex.EncodeToString(w.h.Sum(nil)); info.Code != 0 || strings.Fields(out)[0] != sum {
		t.Errorf("100 MB: the sha256 inside is %q, outside %s", out, sum)
	}

	// The process ends with a full pipe and more in flight; the reader
	// is slow. Nothing written before the end is lost.
	for _, c := range []struct {
		size  int
		delay time.Duration
	}{{4 << 20, time.Millisecond}, {128 << 10, 300 * time.Millisecond}} {
		w = &hashWriter{h: sha256.New(), delay: c.delay}
		r = s.run(t, session.ExecRequest{Shell: fmt.Sprintf("head -c %d /dev/urandom | tee /tmp/g; exit 3", c.size), Stdout: w})
		info, out = s.sh(t, "sha256sum < /tmp/g; rm /tmp/g")
		if sum := hex.EncodeToString(w.h.Sum(nil)); r.Code != 3 || w.n != int64(c.size) || strings.Fields(out)[0] != sum {
			t.Errorf("%d bytes to a reader that takes %v a write, then exit 3: %+v, %d bytes arrived (sha256 %s, inside %q)", c.size, c.delay, r.ExitInfo, w.n, sum, out)
		}
	}
}

// TestConcurrentExecs: 64 execs at once in one session, each with its
// own output on both streams, complete and unmixed.
func TestConcurrentExecs(t *testing.T) {
	s := open(t, opts{})
	const n, lines = 64, 2000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var o, e bytes.Buffer
			p, err := s.Exec(context.Background(), session.ExecRequest{
				Shell:  fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "out-%d-$i"; echo "err-%d-$i" >&2; i=$((i+1)); done; exit %d`, lines, i, i, i%5),
				Stdout: &o, Stderr: &e,
			})
			if err != nil {
				errs <- fmt.Errorf("exec %d: %w", i, err)
				return
			}
			info := p.Wait()
			var wo, we strings.Builder
			for j := range lines {
				fmt.Fprintf(&wo, "out-%d-%d\n", i, j)
				fmt.Fprintf(&we, "err-%d-%d\n", i, j)
			}
			if info.Code != i%5 || o.String() != wo.String() || e.String() != we.String() {
				errs <- fmt.Errorf("exec %d: %+v, stdout %d bytes (want %d), stderr %d bytes (want %d), equal %v %v",
					i, info, o.Len(), wo.Len(), e.Len(), we.Len(), o.String() == wo.String(), e.String() == we.String())
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := s.State(); len(st.Processes) != 0 {
		t.Errorf("processes left: %+v", st.Processes)
	}
}

// TestManyExecsLeakNothing: many execs in a row leave the init and this
// process with the descriptors they had, and the init's memory flat.
func TestManyExecsLeakNothing(t *testing.T) {
	n := 10000
	if testing.Short() {
		n = 200
	}
	s := open(t, opts{})
	initPid := strconv.Itoa(s.State().Pid)
	// The init's descriptors are for root only where the init is not
	// dumpable and this user has no CAP_SYS_PTRACE.
	_, err := os.ReadDir("/proc/" + initPid + "/fd")
	initFDsReadable := err == nil
	if !initFDsReadable {
		t.Logf("the init's descriptors are not checked: %v", err)
	}
	initFDCount := func() int {
		if !initFDsReadable {
			return 0
		}
		return fdCount(t, initPid)
	}
	slow := 0
	once := func(i int) {
		var o, e bytes.Buffer
		p, err := s.Exec(context.Background(), session.ExecRequest{Args: []string{"echo", strconv.Itoa(i)}, Stdout: &o, Stderr: &e, Stdin: strings.NewReader("in")})
		if err != nil {
			t.Fatalf("exec %d: %v", i, err)
		}
		info := p.Wait()
		if info.Code != 0 || o.String() != strconv.Itoa(i)+"\n" {
			t.Fatalf("exec %d: %+v %q", i, info, o.String())
		}
		// Its pipes close with it: the wait delay is not waited out.
		if info.DurationMS >= float64(session.DefaultWaitDelay.Milliseconds()) {
			if slow++; slow > 10 {
				t.Fatalf("%d execs of echo took the wait delay or longer, the last %.1f ms", slow, info.DurationMS)
			}
		}
	}
	for i := range 20 {
		once(i)
	}
	// The stdin copiers of the warm-up end once their process has.
	time.Sleep(100 * time.Millisecond)
	initFDs, selfFDs, rss := initFDCount(), fdCount(t, "self"), vmRSS(t, initPid)
	// Without a collection, a descriptor left to a finalizer counts too.
	gc := debug.SetGCPercent(-1)
	for i := range 200 {
		once(i)
	}
	noGC := fdCount(t, "self")
	debug.SetGCPercent(gc)
	if noGC > selfFDs+2 {
		t.Errorf("this process's descriptors: %d before 200 execs, %d after (without a collection)", selfFDs, noGC)
	}
	start := time.Now()
	for i := range n {
		once(i)
	}
	took := time.Since(start)
	var initAfter, selfAfter int
	eventually(time.Second, func() bool {
		initAfter, selfAfter = initFDCount(), fdCount(t, "self")
		return initAfter == initFDs && selfAfter <= selfFDs+2
	})
	rssAfter := vmRSS(t, initPid)
	t.Logf("%d execs in %v (%.2f ms each); init: %d fds, VmRSS %d KiB -> %d KiB; this process: %d fds -> %d",
		n, took, float64(took.Microseconds())/1000/float64(n), initFDs, rss, rssAfter, selfFDs, selfAfter)
	if initAfter != initFDs {
		t.Errorf("the init's descriptors: %d before %d execs, %d after", initFDs, n, initAfter)
	}
	if selfAfter > selfFDs+2 {
		t.Errorf("this process's descriptors: %d before %d execs, %d after", selfFDs, n, selfAfter)
	}
	if rssAfter-rss > 1024 {
		t.Errorf("the init's VmRSS grew from %d KiB to %d KiB over %d execs", rss, rssAfter, n)
	}
	if st := s.State(); len(st.Processes) != 0 {
		t.Errorf("processes left: %d", len(st.Processes))
	}
}

// TestEvents: a subscriber sees each exec's end, each denied call and
// the session's end.
func TestEvents(t *testing.T) {
	s := open(t, opts{})
	evs := make(chan session.Event, 64)
	cancel := s.Subscribe(func(e session.Event) { evs <- e })
	defer cancel()
	next := func(kind string) session.Event {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for {
			select {
			case e := <-evs:
				if e.Kind == kind {
					return e
				}
			case <-timeout:
				t.Fatalf("no %q event", kind)
			}
		}
	}

	p, err := s.Exec(context.Background(), session.ExecRequest{Shell: "exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	info := p.Wait()
	if e := next("exit"); e.Proc != p.ID() || e.Exit == nil || e.Exit.Code != 3 || *e.Exit != info {
		t.Errorf("exit event: %+v (exit %+v), want proc %s and %+v", e, e.Exit, p.ID(), info)
	}

	r := s.run(t, session.ExecRequest{Shell: "unshare -U true && echo escaped"})
	if r.Code == 0 || strings.Contains(r.out, "escaped") {
		t.Errorf("unshare -U in a session: %+v %q", r.ExitInfo, r.out)
	}
	e := next("violation")
	if e.Action != "unshare" || !strings.Contains(e.Target, "CLONE_NEWUSER") || e.Count < 1 {
		t.Errorf("violation event: %+v, want action unshare on CLONE_NEWUSER", e)
	}

	// A cancelled subscription gets nothing more.
	got := make(chan session.Event, 8)
	stop := s.Subscribe(func(e session.Event) { got <- e })
	stop()
	s.run(t, session.ExecRequest{Args: []string{"true"}})
	next("exit")

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if e := next("state"); e.Status != "stopped" {
		t.Errorf("state event at the end: %+v", e)
	}
	select {
	case e := <-got:
		t.Errorf("a cancelled subscription got %+v", e)
	default:
	}
	if vs := s.Violations(); !slices.ContainsFunc(vs, func(v seccomp.Event) bool { return v.Name == "unshare" }) {
		t.Errorf("Violations after the end: %+v", vs)
	}
	// Calls on an ended session.
	if _, err := s.Exec(context.Background(), session.ExecRequest{Args: []string{"true"}}); !errors.Is(err, session.ErrClosed) {
		t.Errorf("Exec after Close: %v", err)
	}
	if err := s.SignalAll(unix.SIGTERM); !errors.Is(err, session.ErrClosed) {
		t.Errorf("SignalAll after Close: %v", err)
	}
	if st := s.State(); st.Status != "stopped" {
		t.Errorf("State after Close: %+v", st)
	}
}

// TestExecRefusesReachingFDs: a directory, an O_PATH descriptor or a
// terminal is refused as an exec's stdio (each would reach past the
// sandbox, the terminal after the exec too); a pipe is fine.
func TestExecRefusesReachingFDs(t *testing.T) {
	s := open(t, opts{})
	dir, err := os.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	pfd, err := unix.Open("/etc/hostname", unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	opath := os.NewFile(uintptr(pfd), "opath")
	defer opath.Close()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	sfd, err := unix.IoctlRetInt(int(m.Fd()), unix.TIOCGPTPEER)
	if err != nil {
		t.Skipf("no TIOCGPTPEER here: %v", err)
	}
	slave := os.NewFile(uintptr(sfd), "pty-slave")
	defer slave.Close()
	for name, f := range map[string]*os.File{"directory": dir, "O_PATH": opath, "terminal": slave} {
		_, err := s.Exec(context.Background(), session.ExecRequest{Args: []string{"true"}, Stdin: f})
		if errKind(err) != session.KindPolicy {
			t.Errorf("a %s as stdin: %v, want a policy error", name, err)
		}
	}
	// Positive control: a pipe.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p, err := s.Exec(context.Background(), session.ExecRequest{Args: []string{"echo", "ok"}, Stdout: w})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(r); string(b) != "ok\n" || p.Wait().Code != 0 {
		t.Errorf("a pipe as stdout: %q", b)
	}
}
