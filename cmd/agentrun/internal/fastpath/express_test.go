//go:build linux && cgo

package fastpath

import (
	"slices"
	"testing"

	"github.com/agentrun/agentrun/cgroups"
	"github.com/agentrun/agentrun/internal/passenv"
)

// TestExpressLeafNames: the express path (C) and cgroups' sweep (Go) read
// an express cgroup's name alike. A name only one of them took would be
// swept by one and not the other: a cgroup the express path looks past
// while Go would remove it, or one Go leaves behind forever.
func TestExpressLeafNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"sbe-123-4567-4026531836-00ff00ff00ff00ff", true},
		{"sbe-1-0-1-0123456789abcdef", true},
		{"sbe-0042-00-4026531836-00ff00ff00ff00ff", true}, // leading zeros
		{"sbe-2147483647-18446744073709551615-18446744073709551615-ffffffffffffffff", true},
		{"sbe-2147483648-1-1-00ff00ff00ff00ff", false},
		{"sbe-123-18446744073709551616-1-00ff00ff00ff00ff", false}, // beyond 64 bits
		{"sbe-0-1-1-00ff00ff00ff00ff", false},
		{"sbe-123-4567-4026531836-00FF00FF00FF00FF", false},
		{"sbe-123-4567-4026531836-00ff00ff00ff00f", false},
		{"sbe-123-4567-4026531836-00ff00ff00ff00ff0", false},
		{"sbe-123-4567-00ff00ff00ff00ff", false},
		{"sbe-123-4567-4026531836-00ff00ff00ff00ff-", false},
		{"sbe--123-4567-4026531836-00ff00ff00ff00ff", false},
		{"sbe-+123-4567-4026531836-00ff00ff00ff00ff", false},
		{"sbe- 123-4567-4026531836-00ff00ff00ff00ff", false},
		{"sbe-12a-4567-4026531836-00ff00ff00ff00ff", false},
		{"sbe-123-4567-4026531836-+0ff00ff00ff00ff", false},
		{"sbe-123-4567-4026531836-0x0f00ff00ff00ff", false},
		{"sbx-123-00ff00ff00ff00ff", false},
		{"sbe-", false},
		{"tasks", false},
	} {
		cp, cs, cn, cok := parseExpressLeaf(tc.name)
		gp, gs, gn, gok := cgroups.ParseExpressName(tc.name)
		if cok != tc.ok || gok != tc.ok {
			t.Errorf("%q: C says %v, Go says %v; want %v", tc.name, cok, gok, tc.ok)
			continue
		}
		if cok && (cp != gp || cs != gs || cn != gn) {
			t.Errorf("%q: C reads %d %d %d, Go %d %d %d", tc.name, cp, cs, cn, gp, gs, gn)
		}
	}
}

// TestPassEnvMatches checks that the constructor keys on the variables
// that reach the command. One it missed would make every change of it a
// mismatch (an early init thrown away); one too many only splits the
// cache.
func TestPassEnvMatches(t *testing.T) {
	if got := passEnv(); !slices.Equal(got, passenv.Names[:]) {
		t.Fatalf("prestart.c keys on %v; internal/passenv passes %v", got, passenv.Names)
	}
}

// TestNamesMatch checks that the C side and the Go side name the express
// record and the express cgroups alike.
func TestNamesMatch(t *testing.T) {
	if cExpressSuffix != expressSuffix || cLeafPrefix != cgroups.ExpressPrefix {
		t.Fatalf("fastpath.h names %q and %q, the Go side %q and %q", cExpressSuffix, cLeafPrefix, expressSuffix, cgroups.ExpressPrefix)
	}
}
