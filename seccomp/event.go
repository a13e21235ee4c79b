package seccomp

import (
	"fmt"
	"strings"
)

// Event is one kind of denied call seen by a Notifier: a syscall name and
// its salient argument. Repeats of the same name and detail are counted,
// not listed again.
type Event struct {
	// Name is the syscall, e.g. "keyctl" or "unshare".
	Name string `json:"name"`
	// Detail is the argument that decided the denial, e.g.
	// "flags=CLONE_NEWUSER" or "family=AF_PACKET"; empty when the call is
	// denied whatever its arguments.
	Detail string `json:"detail,omitempty"`
	// Suggestion says what would allow the call, or that nothing should.
	Suggestion string `json:"suggestion,omitempty"`
	// Count is how many times the call was denied.
	Count int `json:"count"`
	// PID is the first caller's pid as the Notifier's process sees it (0 if
	// it is not visible there).
	PID int `json:"pid,omitempty"`
}

func (e Event) String() string {
	s := "seccomp denied " + e.Name
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	if e.Count > 1 {
		s += fmt.Sprintf(" (%d times)", e.Count)
	}
	if e.Suggestion != "" {
		s += ": " + e.Suggestion
	}
	return s
}

const (
	customProfile   = "allow it with a custom --seccomp-profile (or --seccomp-profile unconfined)"
	neverAllowed    = "not allowed in a sandbox by design"
	nestedSandbox   = "nested namespaces and containers are not available inside the sandbox; run that tool outside agentrun, or " + customProfile
	mountSuggestion = "the sandbox cannot mount; bind what you need with --ro, --rw or --tmpfs instead"
)

// describe names the salient argument of a denied call and suggests the
// policy change that would allow it. args are the raw syscall arguments.
func describe(name string, args [6]uint64) (detail, suggestion string) {
	switch name {
	case "clone":
		return "flags=" + nsFlagNames(args[0], cloneNSFlags()), nestedSandbox
	case "unshare":
		return "flags=" + nsFlagNames(args[0], unshareNSFlags()), nestedSandbox
	case "setns":
		if t := uint32(args[1]); t != 0 {
			return "nstype=" + nsFlagNames(uint64(t), unshareNSFlags()), nestedSandbox
		}
		return "", nestedSandbox
	case "socket":
		fam := uint32(args[0])
		d := "family=" + familyName(fam)
		if fam == afNetlink {
			d += " protocol=" + netlinkName(uint32(args[2]))
			return d, "only NETLINK_ROUTE netlink sockets are available; " + customProfile
		}
		return d, "only AF_UNIX, AF_INET, AF_INET6 and NETLINK_ROUTE sockets are available; " + customProfile
	case "ioctl":
		switch req := uint32(args[1]); req {
		case ioctlTIOCSTI:
			return "request=TIOCSTI", "injecting input into a terminal is " + neverAllowed
		case ioctlTIOCLINUX:
			return "request=TIOCLINUX", "console control is " + neverAllowed
		default:
			return fmt.Sprintf("request=%#x", req), customProfile
		}
	case "personality":
		return fmt.Sprintf("persona=%#x", uint32(args[0])), "only the default, PER_LINUX32 and UNAME26 personalities are available; " + customProfile
	case "seccomp":
		if uint32(args[1])&filterNewListener != 0 {
			return "flags=SECCOMP_FILTER_FLAG_NEW_LISTENER", "a nested notification listener could answer for agentrun's filter; it is " + neverAllowed
		}
		return fmt.Sprintf("op=%d flags=%#x", uint32(args[0]), uint32(args[1])), customProfile
	case "chmod", "fchmod", "fchmodat", "fchmodat2", "creat", "open", "openat", "mknod", "mknodat":
		idx := 0
		for _, m := range modeArgs() {
			if m.name == name {
				idx = int(m.index)
			}
		}
		return fmt.Sprintf("mode=%#o", uint32(args[idx])&0o7777), "setuid and setgid bits are not allowed on files the sandbox writes: on the host they could grant the workspace owner's privileges"
	case "keyctl", "add_key", "request_key":
		return "", "the kernel keyring is shared with the host (not namespaced); " + customProfile
	case "mount", "umount", "umount2", "pivot_root", "open_tree", "open_tree_attr", "move_mount",
		"fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr":
		return "", mountSuggestion
	case "io_uring_setup", "io_uring_enter", "io_uring_register":
		return "", "io_uring is denied for its kernel attack surface; most programs fall back to epoll or threads; " + customProfile
	case "bpf", "perf_event_open", "userfaultfd":
		return "", "denied for its kernel attack surface; " + customProfile
	case "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
		"reboot", "swapon", "swapoff", "acct", "syslog", "quotactl", "quotactl_fd",
		"settimeofday", "stime", "clock_settime", "adjtimex", "clock_adjtime", "iopl", "ioperm":
		return "", "administers the host; a custom --seccomp-profile (or unconfined) together with the matching --cap-add would allow it"
	}
	return "", customProfile
}

func nsFlagNames(v uint64, known []uint64) string {
	var parts []string
	for _, f := range known {
		if v&f != 0 {
			parts = append(parts, cloneFlagName(f))
			v &^= f
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("%#x", v)
	}
	return strings.Join(parts, "|")
}

func cloneFlagName(f uint64) string {
	switch f {
	case cloneNewTime:
		return "CLONE_NEWTIME"
	case cloneNewNS:
		return "CLONE_NEWNS"
	case cloneNewCgroup:
		return "CLONE_NEWCGROUP"
	case cloneNewUTS:
		return "CLONE_NEWUTS"
	case cloneNewIPC:
		return "CLONE_NEWIPC"
	case cloneNewUser:
		return "CLONE_NEWUSER"
	case cloneNewPID:
		return "CLONE_NEWPID"
	case cloneNewNet:
		return "CLONE_NEWNET"
	}
	return fmt.Sprintf("%#x", f)
}

// familyName names AF_* values (include/linux/socket.h).
func familyName(f uint32) string {
	names := [...]string{
		0: "AF_UNSPEC", 1: "AF_UNIX", 2: "AF_INET", 3: "AF_AX25", 4: "AF_IPX",
		5: "AF_APPLETALK", 6: "AF_NETROM", 7: "AF_BRIDGE", 8: "AF_ATMPVC", 9: "AF_X25",
		10: "AF_INET6", 11: "AF_ROSE", 12: "AF_DECnet", 13: "AF_NETBEUI", 14: "AF_SECURITY",
		15: "AF_KEY", 16: "AF_NETLINK", 17: "AF_PACKET", 18: "AF_ASH", 19: "AF_ECONET",
		20: "AF_ATMSVC", 21: "AF_RDS", 22: "AF_SNA", 23: "AF_IRDA", 24: "AF_PPPOX",
		25: "AF_WANPIPE", 26: "AF_LLC", 27: "AF_IB", 28: "AF_MPLS", 29: "AF_CAN",
		30: "AF_TIPC", 31: "AF_BLUETOOTH", 32: "AF_IUCV", 33: "AF_RXRPC", 34: "AF_ISDN",
		35: "AF_PHONET", 36: "AF_IEEE802154", 37: "AF_CAIF", 38: "AF_ALG", 39: "AF_NFC",
		40: "AF_VSOCK", 41: "AF_KCM", 42: "AF_QIPCRTR", 43: "AF_SMC", 44: "AF_XDP",
		45: "AF_MCTP",
	}
	if int(f) < len(names) {
		return names[f]
	}
	return fmt.Sprintf("%d", f)
}

// netlinkName names NETLINK_* protocols (include/uapi/linux/netlink.h).
func netlinkName(p uint32) string {
	names := [...]string{
		0: "NETLINK_ROUTE", 1: "NETLINK_UNUSED", 2: "NETLINK_USERSOCK", 3: "NETLINK_FIREWALL",
		4: "NETLINK_SOCK_DIAG", 5: "NETLINK_NFLOG", 6: "NETLINK_XFRM", 7: "NETLINK_SELINUX",
		8: "NETLINK_ISCSI", 9: "NETLINK_AUDIT", 10: "NETLINK_FIB_LOOKUP", 11: "NETLINK_CONNECTOR",
		12: "NETLINK_NETFILTER", 13: "NETLINK_IP6_FW", 14: "NETLINK_DNRTMSG",
		15: "NETLINK_KOBJECT_UEVENT", 16: "NETLINK_GENERIC", 18: "NETLINK_SCSITRANSPORT",
		19: "NETLINK_ECRYPTFS", 20: "NETLINK_RDMA", 21: "NETLINK_CRYPTO", 22: "NETLINK_SMC",
	}
	if int(p) < len(names) && names[p] != "" {
		return names[p]
	}
	return fmt.Sprintf("%d", p)
}
