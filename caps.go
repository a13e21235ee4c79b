package agentrun

import (
	"strings"

	"github.com/agentrun/agentrun/internal/capnames"
)

// normalizeCaps turns "net_raw" or "CAP_NET_RAW" into CAP_NET_RAW and
// refuses names the kernel does not have. Capabilities are those of the
// sandbox's user namespace: they act on the sandbox's own namespaces and
// the files its ids own, never on the host.
func normalizeCaps(in []string) ([]string, error) {
	known := map[string]bool{}
	for _, n := range capnames.Names() {
		known[n] = true
	}
	var out []string
	seen := map[string]bool{}
	for _, c := range in {
		n := strings.ToUpper(strings.TrimSpace(c))
		if !strings.HasPrefix(n, "CAP_") {
			n = "CAP_" + n
		}
		if !known[n] {
			return nil, policyErr("unknown capability %q", c)
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out, nil
}
