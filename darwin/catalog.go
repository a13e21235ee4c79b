package darwin

// The fixed parts of every profile. They are data, not rules, so the
// generator stays one loop per section and a reviewer can audit each list.

// systemReadDirs are read-only so host tools run: binaries, libraries, the
// dyld shared cache, toolchains and package-manager prefixes. /System is
// deliberately not granted whole: /System/Volumes/Data is a second spelling
// of every user's home directory.
var systemReadDirs = [...]string{
	"/bin",
	"/sbin",
	"/usr",
	"/opt",
	"/nix",
	"/System/Library",
	"/System/Cryptexes",
	"/System/Volumes/Preboot/Cryptexes",
	"/Library/Apple",
	"/Library/Developer",
	"/Library/Frameworks",
	"/Library/Java",
	"/Library/Fonts",
	"/Library/Preferences/Logging",
	"/private/etc",
	"/private/var/db/timezone",
	"/private/var/db/dyld",
	"/private/var/select",
}

// systemReadFiles are single system files tools read at start-up.
var systemReadFiles = [...]string{
	"/Library/Preferences/.GlobalPreferences.plist",
	"/private/var/db/xcode_select_link",
	"/dev",
}

// systemLinks are the top-level symlinks; following them needs a metadata
// read of the link itself.
var systemLinks = [...]string{"/tmp", "/var", "/etc"}

// device access, by what a process may do with it. The caller's own
// terminals are added per run; other ttys stay closed so a sandboxed process
// cannot open another terminal of the same user and read its keystrokes.
var (
	devReadWrite = [...]string{"/dev/null", "/dev/zero", "/dev/dtracehelper", "/dev/tty"}
	devReadOnly  = [...]string{"/dev/random", "/dev/urandom", "/dev/autofs_nowait"}
	devFDLinks   = [...]string{"/dev/stdin", "/dev/stdout", "/dev/stderr"}
	devFDDir     = "/dev/fd"
	devPTMX      = "/dev/ptmx"
)

// ptySlavePattern matches pty slaves; the profile only lets a process use
// the ones it allocated itself (they carry the pty sandbox extension).
const ptySlavePattern = `^/dev/ttys[0-9]+$`

// sysctlNames and sysctlPrefixes are what runtimes (Go, Python, Node, the
// JVM, Rust) and common tools read about the machine. Process tables
// (kern.proc.*) are left out: they would show host processes.
var sysctlNames = [...]string{
	"hw.activecpu", "hw.byteorder", "hw.busfrequency_compat", "hw.cachelinesize",
	"hw.cachelinesize_compat", "hw.cpufamily", "hw.cpufrequency", "hw.cpufrequency_compat",
	"hw.cpusubtype", "hw.cputype", "hw.l1dcachesize", "hw.l1dcachesize_compat",
	"hw.l1icachesize", "hw.l1icachesize_compat", "hw.l2cachesize", "hw.l2cachesize_compat",
	"hw.l3cachesize", "hw.l3cachesize_compat", "hw.logicalcpu", "hw.logicalcpu_max",
	"hw.machine", "hw.memsize", "hw.model", "hw.ncpu", "hw.nperflevels", "hw.packages",
	"hw.pagesize", "hw.pagesize_compat", "hw.physicalcpu", "hw.physicalcpu_max",
	"hw.tbfrequency", "hw.tbfrequency_compat", "hw.vectorunit",
	"kern.argmax", "kern.boottime", "kern.hostname", "kern.maxfiles", "kern.maxfilesperproc",
	"kern.maxproc", "kern.ngroups", "kern.osproductversion", "kern.osrelease", "kern.ostype",
	"kern.osvariant_status", "kern.osversion", "kern.secure_kernel", "kern.usrstack64",
	"kern.version", "machdep.cpu.brand_string", "sysctl.proc_cputype", "sysctl.proc_native",
	"sysctl.proc_translated", "vm.loadavg",
}

var sysctlPrefixes = [...]string{"hw.optional.", "hw.perflevel", "machdep.cpu."}

// machBase are the services any run may look up: user and group lookups,
// notifications, and logging (write-only from the sandbox's side).
var machBase = [...]string{
	"com.apple.system.opendirectoryd.libinfo",
	"com.apple.system.opendirectoryd.membership",
	"com.apple.system.notification_center",
	"com.apple.system.logger",
	"com.apple.logd",
}

// machHostNetwork are DNS and certificate trust. They are granted only with
// the host network: mDNSResponder and trustd make network requests on the
// caller's behalf (DNS queries, AIA and OCSP fetches), which would be an
// exfiltration channel for a sandbox that is meant to be offline or
// restricted to a proxy.
var machHostNetwork = [...]string{
	"com.apple.dnssd.service",
	"com.apple.SystemConfiguration.configd",
	"com.apple.SystemConfiguration.DNSConfiguration",
	"com.apple.trustd",
	"com.apple.trustd.agent",
	"com.apple.SecurityServer",
	"com.apple.ocspd",
}

// mDNSResponderSocket is the resolver's unix socket (host network only).
const mDNSResponderSocket = "/private/var/run/mDNSResponder"

// homeSecrets are credentials and shell start-up files, relative to the
// caller's home. They stay unreadable and unwritable even when a grant
// (say, the workspace being $HOME) covers them, and the rc files cannot be
// planted with commands the next interactive shell would run.
var homeSecrets = [...]string{
	".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".kube", ".docker",
	".netrc", ".git-credentials", ".config/gh", ".npmrc", ".pypirc",
	".cargo/credentials.toml", "Library/Keychains",
	".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".bash_history",
	".profile", ".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout",
	".zsh_history", ".config/fish",
}

// systemSecrets are secrets outside any home.
var systemSecrets = [...]string{"/Library/Keychains"}

// dataVolume is the second spelling of everything on the data volume
// (/Users, /Library...). Secrets are denied under both spellings.
const dataVolume = "/System/Volumes/Data"
