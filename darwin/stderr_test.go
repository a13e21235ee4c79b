package darwin

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// feed writes chunks to a new filter and returns it with its output.
func feed(t *testing.T, chunks ...string) (*StderrFilter, *bytes.Buffer) {
	t.Helper()
	var out bytes.Buffer
	f := NewStderrFilter(&out)
	for _, c := range chunks {
		if n, err := f.Write([]byte(c)); n != len(c) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", c, n, err)
		}
	}
	return f, &out
}

func TestStderrFilterDropsBanner(t *testing.T) {
	f, out := feed(t, "WARNING: sandbox-exec is deprecated. Consider adopting the App Sandbox instead.\n", "hello\n")
	if err := f.Finish(false); err != nil {
		t.Fatal(err)
	}
	if out.String() != "hello\n" {
		t.Errorf("output %q, want only the command's line", out)
	}
}

func TestStderrFilterHoldsLauncherError(t *testing.T) {
	f, out := feed(t, "sandbox-exec: sandbox_apply: Operation not permitted\n")
	if got := f.Held(); !slices.Equal(got, []string{"sandbox-exec: sandbox_apply: Operation not permitted"}) {
		t.Errorf("Held = %q", got)
	}
	if out.Len() != 0 {
		t.Errorf("launcher error written before the outcome is known: %q", out)
	}
	_ = f.Finish(true)
	if out.Len() != 0 {
		t.Errorf("suppressed error was written: %q", out)
	}
}

func TestStderrFilterReleasesHeldLinesWhenNotSuppressed(t *testing.T) {
	f, out := feed(t, "sandbox-exec: execvp() of 'nope' failed: No such file or directory\n")
	_ = f.Finish(false)
	if out.String() != "sandbox-exec: execvp() of 'nope' failed: No such file or directory\n" {
		t.Errorf("output %q", out)
	}
}

func TestStderrFilterCommandLinesStartingLikeLauncher(t *testing.T) {
	// The command printed a sandbox-exec-looking line, then more: it was the
	// command's, in order, and nothing stays held.
	f, out := feed(t, "sandbox-exec: something\n", "then mine\n")
	if len(f.Held()) != 0 {
		t.Errorf("Held = %q, want nothing", f.Held())
	}
	_ = f.Finish(true)
	if out.String() != "sandbox-exec: something\nthen mine\n" {
		t.Errorf("output %q", out)
	}
}

func TestStderrFilterByteByByte(t *testing.T) {
	in := "WARNING: sandbox-exec is deprecated.\nsan\tpartial without newline"
	var chunks []string
	for i := range len(in) {
		chunks = append(chunks, in[i:i+1])
	}
	f, out := feed(t, chunks...)
	_ = f.Finish(false)
	if out.String() != "san\tpartial without newline" {
		t.Errorf("output %q", out)
	}
}

func TestStderrFilterPassthroughAfterFirstOutput(t *testing.T) {
	f, out := feed(t, "progress", " 50%", "\nWARNING: sandbox-exec is deprecated\n")
	_ = f.Finish(false)
	if out.String() != "progress 50%\nWARNING: sandbox-exec is deprecated\n" {
		t.Errorf("a later banner-like line must pass through untouched, got %q", out)
	}
}

func TestStderrFilterUnterminatedLauncherLine(t *testing.T) {
	f, _ := feed(t, "sandbox-exec: sandbox_apply: Operation not permitted")
	if got := f.Held(); len(got) != 1 {
		t.Errorf("Held = %q, want the unterminated launcher line", got)
	}
}

func TestStderrFilterLongFirstLine(t *testing.T) {
	long := "sandbox-exec: " + string(bytes.Repeat([]byte("x"), maxHeadBytes+10))
	f, out := feed(t, long)
	if out.Len() != len(long) || len(f.Held()) != 0 {
		t.Errorf("an over-long first line must be released, wrote %d bytes", out.Len())
	}
}

type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	w.n++
	return 0, errors.New("closed")
}

func TestStderrFilterWriterErrorDoesNotBlock(t *testing.T) {
	w := &failWriter{}
	f := NewStderrFilter(w)
	for range 3 {
		if n, err := f.Write([]byte("x\n")); n != 2 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if err := f.Finish(false); err == nil {
		t.Error("Finish lost the writer's error")
	}
	if w.n != 1 {
		t.Errorf("writer called %d times after failing, want 1", w.n)
	}
}

func TestStderrFilterNilWriter(t *testing.T) {
	f := NewStderrFilter(nil)
	if _, err := f.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if err := f.Finish(false); err != nil {
		t.Fatal(err)
	}
}
