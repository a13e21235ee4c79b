//go:build linux && cgo

package cinit_test

import (
	"testing"

	"github.com/agentrun/agentrun"
	"github.com/agentrun/agentrun/mounts"
	"github.com/agentrun/agentrun/nsinit/internal/cinit"
)

// TestTypeRootTemplate ties the root template's mount type as the C init
// knows it to the mounts package's.
func TestTypeRootTemplate(t *testing.T) {
	if cinit.TypeRootTemplate != mounts.TypeRootTemplate {
		t.Fatalf("cinit.h's AR_TYPE_ROOT_TEMPLATE is %q, mounts.TypeRootTemplate %q", cinit.TypeRootTemplate, mounts.TypeRootTemplate)
	}
}

// TestExitSetupFailed ties the C init's setup-failure status (cinit.h) to
// the spawn contract's (agentrun.ExitSetupFailed): C cannot import a Go
// constant, so the two definitions are held equal here.
func TestExitSetupFailed(t *testing.T) {
	if cinit.ExitSetupFailed != agentrun.ExitSetupFailed {
		t.Fatalf("cinit.h's AR_EXIT_SETUP_FAILED is %d, agentrun.ExitSetupFailed %d", cinit.ExitSetupFailed, agentrun.ExitSetupFailed)
	}
}
