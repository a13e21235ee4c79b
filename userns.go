package agentrun

import (
	"os"
	"strings"
)

// UsernsBlocker names what stops this host from creating user namespaces,
// as a one-line instruction, or returns "" when nothing known does.
func UsernsBlocker() string {
	return usernsBlocker(func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	})
}

func usernsBlocker(read func(string) string) string {
	switch {
	case read("/proc/sys/user/max_user_namespaces") == "0":
		return "user namespaces are disabled: user.max_user_namespaces is 0 (run: sysctl -w user.max_user_namespaces=15000)"
	case read("/proc/sys/kernel/unprivileged_userns_clone") == "0" && os.Geteuid() != 0:
		return "unprivileged user namespaces are disabled: kernel.unprivileged_userns_clone is 0 (run: sysctl -w kernel.unprivileged_userns_clone=1)"
	case read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1" && os.Geteuid() != 0:
		return "AppArmor restricts unprivileged user namespaces: kernel.apparmor_restrict_unprivileged_userns is 1 (add an AppArmor profile allowing userns for agentrun, or sysctl -w kernel.apparmor_restrict_unprivileged_userns=0)"
	}
	return ""
}
