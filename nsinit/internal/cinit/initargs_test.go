//go:build linux && cgo

package cinit

import "testing"

// TestInitialArgsAgree: a musl build's constructor gets no arguments and
// finds them on the initial stack; in this (glibc) test binary, what it
// would find must be what glibc passed.
func TestInitialArgsAgree(t *testing.T) {
	if !initialArgsAgree() {
		t.Fatal("initial_args does not find the argc, argv and envp the kernel passed: a musl build would prestart and hide the wrong command line")
	}
}
