//go:build linux

package nsinit

import (
	"fmt"
	"os"
)

// Init backends, the values of Config.Backend.
const (
	// BackendC clones the init (written in C, nsinit/internal/cinit)
	// straight from this process: no re-exec and no second Go runtime on
	// the spawn path. Only cgo builds have it.
	BackendC = "c"
	// BackendGo re-executes this binary as the Go init (Dispatch, Init).
	BackendGo = "go"
)

// BackendEnv names the environment variable that overrides Config.Backend
// ("c" or "go"), for tests and benchmarks that compare the two.
const BackendEnv = "AGENTRUN_INIT"

// DefaultBackend is BackendC in cgo builds and BackendGo otherwise.
func DefaultBackend() string {
	if haveCInit {
		return BackendC
	}
	return BackendGo
}

// SelectBackend resolves the backend to use: BackendEnv if set, else
// configured, else DefaultBackend.
func SelectBackend(configured string) (string, error) {
	b := configured
	if env := os.Getenv(BackendEnv); env != "" {
		b = env
	}
	if b == "" {
		b = DefaultBackend()
	}
	switch b {
	case BackendGo:
		return b, nil
	case BackendC:
		if !haveCInit {
			return "", &StepError{Step: "init backend", Msg: "the C init needs a cgo build (CGO_ENABLED=1); set " + BackendEnv + "=go"}
		}
		return b, nil
	}
	return "", &StepError{Step: "init backend", Msg: fmt.Sprintf("unknown init backend %q (want %s or %s)", b, BackendC, BackendGo)}
}

// startSelected starts the sandbox with the C init when that is the
// selected backend. handled is false when the Go init should start it.
func startSelected(cfg *Config) (p *Process, handled bool, err error) {
	b, err := SelectBackend(cfg.Backend)
	if err != nil {
		return nil, true, err
	}
	if b != BackendC {
		return nil, false, nil
	}
	p, err = startC(cfg)
	return p, true, err
}
