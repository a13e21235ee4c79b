//go:build linux && cgo

package cinit_test

import (
	"testing"

	"github.com/agentrun/agentrun"
	"github.com/agentrun/agentrun/nsinit/internal/cinit"
)

// TestExitSetupFailed ties the C init's setup-failure status (cinit.h) to
// the spawn contract's (agentrun.ExitSetupFailed): C cannot import a Go
// constant, so the two definitions are held equal here.
func TestExitSetupFailed(t *testing.T) {
	if cinit.ExitSetupFailed != agentrun.ExitSetupFailed {
		t.Fatalf("cinit.h's AR_EXIT_SETUP_FAILED is %d, agentrun.ExitSetupFailed %d", cinit.ExitSetupFailed, agentrun.ExitSetupFailed)
	}
}
