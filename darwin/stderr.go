package darwin

import (
	"bytes"
	"io"
	"strings"
	"sync"
)

// maxHeadBytes caps how much of a first line the filter buffers while it
// decides whether the line is sandbox-exec's.
const maxHeadBytes = 4096

// StderrFilter sits between the sandbox's stderr and the caller's. Until
// the command writes anything of its own, lines from sandbox-exec itself
// are taken out: the deprecation banner some macOS versions print is
// dropped, and "sandbox-exec: ..." errors are held back, because they are
// how a failed launch (nested sandbox, bad profile, missing command) shows
// itself and the caller decides whether to print them. From the first
// byte that is not sandbox-exec's, everything passes through unchanged.
type StderrFilter struct {
	mu   sync.Mutex
	w    io.Writer
	head bool
	buf  []byte
	held []string
	err  error
}

// NewStderrFilter filters into w (nil discards).
func NewStderrFilter(w io.Writer) *StderrFilter {
	if w == nil {
		w = io.Discard
	}
	return &StderrFilter{w: w, head: true}
}

// Write never fails: a caller's writer that breaks must not block or kill
// the sandboxed command, so its first error is kept for Finish.
func (f *StderrFilter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.head {
		f.emit(p)
		return len(p), nil
	}
	f.buf = append(f.buf, p...)
	f.scanHead()
	return len(p), nil
}

// scanHead consumes complete sandbox-exec lines from the buffer and leaves
// the head state at the first byte that cannot belong to one.
func (f *StderrFilter) scanHead() {
	for f.head {
		i := bytes.IndexByte(f.buf, '\n')
		if i < 0 {
			if !couldBeLauncherLine(string(f.buf)) || len(f.buf) > maxHeadBytes {
				f.release()
			}
			return
		}
		line := string(f.buf[:i])
		switch {
		case isDeprecationBanner(line):
		case isLauncherLine(line):
			f.held = append(f.held, line)
		default:
			f.release()
			return
		}
		f.buf = f.buf[i+1:]
	}
}

// release ends the head state: whatever was held came before the
// command's own output, so it was the command's and is written first.
func (f *StderrFilter) release() {
	f.head = false
	for _, l := range f.held {
		f.emit([]byte(l + "\n"))
	}
	f.held = nil
	f.emit(f.buf)
	f.buf = nil
}

func (f *StderrFilter) emit(p []byte) {
	if f.err != nil || len(p) == 0 {
		return
	}
	if _, err := f.w.Write(p); err != nil {
		f.err = err
	}
}

// Held returns the sandbox-exec lines still held back. Call it after the
// stream has ended; an unterminated last line counts.
func (f *StderrFilter) Held() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.head && len(f.buf) > 0 && isLauncherLine(string(f.buf)) {
		f.held = append(f.held, string(f.buf))
		f.buf = nil
	}
	return append([]string(nil), f.held...)
}

// Finish writes what is still held unless suppress is set (the launch
// failed and the reason travels in an error instead), and returns the
// first write error of the caller's writer.
func (f *StderrFilter) Finish(suppress bool) error {
	held := f.Held()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !suppress {
		for _, l := range held {
			f.emit([]byte(l + "\n"))
		}
		f.emit(f.buf)
	}
	f.held, f.buf, f.head = nil, nil, false
	return f.err
}

const (
	launcherPrefix = "sandbox-exec: "
	bannerPrefix   = "warning: sandbox-exec"
)

func isLauncherLine(line string) bool {
	return strings.HasPrefix(line, launcherPrefix)
}

// isDeprecationBanner matches the notice newer macOS releases print before
// running the command ("WARNING: sandbox-exec is deprecated ...").
func isDeprecationBanner(line string) bool {
	l := strings.ToLower(line)
	return (strings.HasPrefix(l, bannerPrefix) || strings.HasPrefix(l, launcherPrefix+"warning")) &&
		strings.Contains(l, "deprecated")
}

// couldBeLauncherLine reports whether an unfinished line may still turn
// into a sandbox-exec line, so the filter keeps waiting for its end.
func couldBeLauncherLine(partial string) bool {
	l := strings.ToLower(partial)
	for _, p := range []string{launcherPrefix, bannerPrefix} {
		if strings.HasPrefix(p, l) || strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}
