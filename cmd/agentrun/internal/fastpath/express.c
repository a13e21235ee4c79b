//go:build linux && cgo

/*
 * express.c: a prestart hit without the Go runtime (contract in fastpath.h).
 *
 * On a hit the Go side only confirms that the cached plan is still its
 * own, makes the cgroup, sends the release and waits. When Go adopted an
 * init from an image, it also wrote an express record next to it: every
 * host input the plan was compiled from, as a fingerprint, the cgroup
 * recipe, the signals and the release message. Here, in the constructor,
 * the next spawn with the same key checks each fingerprint, and only if
 * all of them still hold does it do those steps itself and exit with the
 * command's status; Go never starts. Anything unusual before the release
 * (a changed host file, a record or an express cgroup of a killed runtime
 * to sweep, a cgroup that cannot be made) undoes what was done here and returns, and the
 * spawn goes the ordinary way.
 */
#define _GNU_SOURCE
#include "fastpath.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#ifndef SYS_faccessat2
#error "the C library's headers lack SYS_faccessat2 (Linux 5.8): the express path's A fingerprints need it"
#endif
#ifndef AT_EACCESS
#define AT_EACCESS 0x200
#endif

#define EXPRESS_MAX (256 << 10)

struct express {
	char path[PATH_MAX]; /* of the record */
	char *text; /* the record, lines split at '\n' */
	size_t len;
	uint64_t image_sum;
	int sigs[AR_SIGFWD_MAX], nsigs;
	char *state_dir, *cg_dir;
	char *cg_parent; /* cg_dir's base name: checked, kept for the format */
	long long pids_max;
	int no_cgroup; /* "no-cgroup": state_dir alone is set */
	unsigned char release[AR_RELEASE_MAX];
	size_t release_len;
	char *prints; /* the first fingerprint line */
	unsigned long long self_ns; /* this process's PID namespace (inode) */
};

/* trace writes one line to $AGENTRUN_EXPRESS_TRACE, for tests: whether
 * the express path ran, and if not, why. */
static void trace(const char *what, const char *detail)
{
	const char *t = getenv("AGENTRUN_EXPRESS_TRACE");
	if (!t || t[0] != '/')
		return;
	char line[PATH_MAX + 64];
	int n = snprintf(line, sizeof line, "express: %s%s%s\n", what, detail ? " " : "", detail ? detail : "");
	if (n <= 0 || (size_t)n >= sizeof line)
		return;
	int fd = open(t, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return;
	(void)!write(fd, line, (size_t)n);
	close(fd);
}

/* next_line returns the line at *at (NUL-terminated in place) and moves
 * *at past it; NULL at the end. */
static char *next_line(struct express *x, char **at)
{
	char *s = *at;
	if (!s || s >= x->text + x->len)
		return NULL;
	char *nl = memchr(s, '\n', (size_t)(x->text + x->len - s));
	if (!nl)
		return NULL;
	*nl = 0;
	*at = nl + 1;
	return s;
}

/* field cuts s at the next tab: returns s, *rest is after the tab (NULL
 * when there is none). */
static char *field(char *s, char **rest)
{
	char *t = s ? strchr(s, '\t') : NULL;
	if (t)
		*t++ = 0;
	*rest = t;
	return s;
}

static int parse_u64(const char *s, int base, unsigned long long *v)
{
	if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
		return -1;
	char *end;
	errno = 0;
	*v = strtoull(s, &end, base);
	return errno || *end ? -1 : 0;
}

/* parse_cgroup reads the fields after "cgroup". */
static int parse_cgroup(struct express *x, char *rest)
{
	char *l;
	unsigned long long v;
	x->state_dir = field(rest, &rest);
	x->cg_parent = field(rest, &rest);
	x->cg_dir = field(rest, &rest);
	if (!rest || field(rest, &l) == NULL || l || parse_u64(rest, 10, &v) < 0 || v == 0 || v > LLONG_MAX)
		return -1;
	x->pids_max = (long long)v;
	if (!x->state_dir || x->state_dir[0] != '/' || !x->cg_dir || x->cg_dir[0] != '/' || !x->cg_parent ||
	    !x->cg_parent[0] || strchr(x->cg_parent, '/') || strcmp(x->cg_parent, ".") == 0 || strcmp(x->cg_parent, "..") == 0)
		return -1;
	return 0;
}

/* parse reads the header lines (cinit.h). */
static int parse(struct express *x)
{
	char *at = x->text, *rest, *l;
	unsigned long long v;
	if (x->len == 0 || x->text[x->len - 1] != '\n')
		return -1;
	if (!(l = next_line(x, &at)) || strcmp(l, "agentrun-express 1") != 0)
		return -1;
	if (!(l = next_line(x, &at)) || strncmp(l, "image ", 6) != 0 || strlen(l + 6) != 16 || parse_u64(l + 6, 16, &v) < 0)
		return -1;
	x->image_sum = v;
	if (!(l = next_line(x, &at)) || strncmp(l, "signals", 7) != 0)
		return -1;
	for (char *s = l + 7; *s;) {
		if (*s++ != ' ' || x->nsigs >= AR_SIGFWD_MAX)
			return -1;
		char *end;
		long sig = strtol(s, &end, 10);
		if (end == s || sig < 1 || sig > 64)
			return -1;
		x->sigs[x->nsigs++] = (int)sig;
		s = end;
	}
	if (!(l = next_line(x, &at)))
		return -1;
	const char *kind = field(l, &rest);
	if (kind && strcmp(kind, "no-cgroup") == 0) {
		x->no_cgroup = 1;
		x->state_dir = field(rest, &rest);
		if (rest || !x->state_dir || x->state_dir[0] != '/')
			return -1;
	} else if (!kind || strcmp(kind, "cgroup") != 0) {
		return -1;
	} else if (parse_cgroup(x, rest) < 0) {
		return -1;
	}
	if (!(l = next_line(x, &at)) || strncmp(l, "release ", 8) != 0)
		return -1;
	size_t hl = strlen(l + 8);
	if (hl % 2 || hl / 2 > sizeof x->release || hl / 2 < 4)
		return -1;
	for (size_t i = 0; i < hl / 2; i++) {
		int a = ar_hexval(l[8 + 2 * i]), b = ar_hexval(l[9 + 2 * i]);
		if (a < 0 || b < 0)
			return -1;
		x->release[i] = (unsigned char)(a << 4 | b);
	}
	x->release_len = hl / 2;
	if ((x->release_len - 4) % 8)
		return -1;
	x->prints = at;
	/* The last line is "end": a record cut short is not a record. */
	return x->len >= 4 && memcmp(x->text + x->len - 4, "end\n", 4) == 0 &&
			       (x->len == 4 || x->text[x->len - 5] == '\n')
		       ? 0
		       : -1;
}

/* access_w answers as Go's unix.Faccessat(path, W_OK, AT_EACCESS), which
 * cgroups' writable calls: 0 or the errno. Where Go would emulate the
 * call in user space (faccessat2 failing with ENOSYS or EPERM), -1: the
 * answers could differ, so the fingerprint does not hold. */
static int access_w(const char *path)
{
	long r = syscall(SYS_faccessat2, AT_FDCWD, path, W_OK, AT_EACCESS);
	if (r == 0)
		return 0;
	return errno == ENOSYS || errno == EPERM ? -1 : errno;
}

/* check_print: does one fingerprint line still hold? detail gets the
 * path for the trace. */
static int check_print(char *line, const char **detail)
{
	char *rest, *kind = field(line, &rest);
	char *path = field(rest, &rest);
	*detail = path;
	if (!kind || !path)
		return 0;
	if (strcmp(kind, "C") == 0) {
		static char buf[16384]; /* static: no stack probes (cinit.c, big_locals) */
		int fd = open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return 0;
		size_t n = 0;
		ssize_t r;
		while (n < sizeof buf && ((r = read(fd, buf + n, sizeof buf - n)) > 0 || (r < 0 && errno == EINTR)))
			if (r > 0)
				n += (size_t)r;
		close(fd);
		char want[24];
		snprintf(want, sizeof want, "%016llx", (unsigned long long)ar_fnv1a((unsigned char *)buf, n, AR_FNV_OFFSET));
		*detail = "/proc/self/cgroup";
		return n < sizeof buf && !rest && strcmp(path, want) == 0;
	}
	if (!rest || path[0] != '/')
		return 0;
	if (strcmp(kind, "L") == 0) {
		struct stat st;
		int ok = lstat(path, &st) == 0;
		if (strcmp(rest, "-") == 0)
			return !ok;
		if (!ok)
			return 0;
		/* mode uid gid size dev ino, and a regular file's ctime in ns. */
		unsigned long long f[7];
		int n = S_ISREG(st.st_mode) ? 7 : 6;
		for (int i = 0; i < n; i++) {
			char *v = field(rest, &rest);
			if (!v || (i < n - 1) != (rest != NULL) || parse_u64(v, 10, &f[i]) < 0)
				return 0;
		}
		unsigned long long size = S_ISREG(st.st_mode) ? (unsigned long long)st.st_size : 0;
		unsigned long long ctime_ns = (unsigned long long)st.st_ctim.tv_sec * 1000000000ULL + (unsigned long long)st.st_ctim.tv_nsec;
		return f[0] == st.st_mode && f[1] == st.st_uid && f[2] == st.st_gid && f[3] == size &&
		       f[4] == (unsigned long long)st.st_dev && f[5] == (unsigned long long)st.st_ino &&
		       (n == 6 || f[6] == ctime_ns);
	}
	if (strcmp(kind, "R") == 0) {
		char t[PATH_MAX];
		ssize_t n = readlink(path, t, sizeof t);
		return n >= 0 && (size_t)n < sizeof t && strlen(rest) == (size_t)n && memcmp(t, rest, (size_t)n) == 0;
	}
	if (strcmp(kind, "E") == 0) {
		char t[PATH_MAX];
		int ok = realpath(path, t) != NULL;
		if (strcmp(rest, "-") == 0)
			return !ok;
		return ok && strcmp(t, rest) == 0;
	}
	if (strcmp(kind, "A") == 0) {
		unsigned long long want;
		int got = access_w(path);
		return got >= 0 && parse_u64(rest, 10, &want) == 0 && want == (unsigned long long)got;
	}
	return 0;
}

/* private_dir: a real directory of euid's that nobody else may write:
 * what is read from it steers what a sweep removes. */
static int private_dir(const char *dir, uid_t euid)
{
	struct stat st;
	return lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == euid && !(st.st_mode & 022);
}

/* json_u64 reads "key":N from a record; -1 when absent. */
static int json_u64(const char *msg, const char *key, unsigned long long *v)
{
	char pat[32];
	snprintf(pat, sizeof pat, "\"%s\":", key);
	const char *s = strstr(msg, pat);
	if (!s)
		return -1;
	s += strlen(pat);
	char *end;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return end == s || errno || *s == '-' ? -1 : 0;
}

/* owner_start is field 22 of a /proc/PID/stat (cgroups.ownerOf). */
static int owner_start(unsigned long long *start, const char *stat_path)
{
	char buf[1024];
	if (ar_read_text(stat_path, buf, sizeof buf) < 0)
		return -1;
	char *s = strrchr(buf, ')');
	if (!s)
		return -1;
	s++;
	/* After ")": field 3 onward; starttime is the 20th of them. */
	for (int i = 0; i < 20; i++) {
		while (*s == ' ')
			s++;
		if (!*s)
			return -1;
		if (i == 19)
			break;
		while (*s && *s != ' ')
			s++;
	}
	char *end;
	*start = strtoull(s, &end, 10);
	return end == s ? -1 : 0;
}

/* owner_live: the runtime process (pid, start, pidns) still runs, or
 * cannot be judged from this PID namespace (cgroups.Manager.ownerAlive). */
static int owner_live(unsigned long long pid, unsigned long long start, unsigned long long ns, unsigned long long self_ns)
{
	char path[64];
	unsigned long long now;
	if (ns != self_ns)
		return 1; /* pids of another namespace cannot be checked: kept */
	struct stat st;
	snprintf(path, sizeof path, "/proc/%llu/ns/pid", pid);
	if (stat(path, &st) < 0 || (unsigned long long)st.st_ino != ns)
		return 0;
	snprintf(path, sizeof path, "/proc/%llu/stat", pid);
	return owner_start(&now, path) == 0 && now == start;
}

/* record_stale: the cgroup record at dir/name belongs to a runtime that is
 * gone, so a sweep would remove it, or it cannot be read. */
static int record_stale(int dfd, const char *name, unsigned long long self_ns)
{
	char buf[4096];
	size_t len = strlen(name);
	if (len <= 5 || strcmp(name + len - 5, ".json") != 0)
		return 0;
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return 1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	unsigned long long pid, start, ns;
	if (n <= 0)
		return 1;
	buf[n] = 0;
	if (json_u64(buf, "owner_pid", &pid) < 0 || json_u64(buf, "owner_start", &start) < 0 ||
	    json_u64(buf, "owner_pidns", &ns) < 0 || pid == 0 || pid > INT_MAX)
		return 1;
	return !owner_live(pid, start, ns, self_ns);
}

/* ar_express_parse_leaf reads an express cgroup's name,
 * sbe-PID-START-PIDNS-RANDOM (cgroups.ParseExpressName, which must accept
 * the same names): 0, or -1 for any other name. */
int ar_express_parse_leaf(const char *name, unsigned long long *pid, unsigned long long *start, unsigned long long *ns)
{
	if (strncmp(name, EXPRESS_LEAF_PREFIX, strlen(EXPRESS_LEAF_PREFIX)) != 0)
		return -1;
	const char *s = name + strlen(EXPRESS_LEAF_PREFIX);
	unsigned long long *v[3] = {pid, start, ns};
	for (int i = 0; i < 3; i++) {
		char *end;
		if (*s < '0' || *s > '9')
			return -1;
		errno = 0;
		*v[i] = strtoull(s, &end, 10);
		if (errno || *end != '-')
			return -1;
		s = end + 1;
	}
	size_t n = strlen(s);
	for (size_t i = 0; i < n; i++)
		if (ar_hexval(s[i]) < 0)
			return -1;
	return n == 16 && *pid > 0 && *pid <= INT_MAX ? 0 : -1;
}

/* leaf_stale: dir/name is an express cgroup of this user's (the creator
 * owns a cgroup directory) whose runtime is gone. Another user's is not
 * this spawn's to judge, as its state records would not be: its runtime's
 * /proc entries may not even be readable here. */
static int leaf_stale(int dfd, const char *name, unsigned long long self_ns)
{
	unsigned long long pid, start, ns;
	struct stat st;
	return ar_express_parse_leaf(name, &pid, &start, &ns) == 0 &&
	       fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
	       !owner_live(pid, start, ns, self_ns);
}

/* any_stale: dir holds an entry stale says a sweep would remove. A
 * directory that is missing holds none; one that cannot be read might. */
static int any_stale(const char *dir, unsigned long long self_ns, int (*stale)(int, const char *, unsigned long long))
{
	/* getdents64 into a static buffer: opendir's allocation costs this
	 * spawn more than the (usually empty) directory's read. */
	static char buf[8192] __attribute__((aligned(8)));
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return errno != ENOENT;
	int found = 0;
	long n;
	while (!found && (n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
		for (long at = 0; !found && at < n;) {
			/* Linux's struct dirent is getdents64's record. */
			const struct dirent *e = (const struct dirent *)(buf + at);
			found = stale(fd, e->d_name, self_ns);
			at += e->d_reclen;
		}
	}
	if (n < 0)
		found = 1; /* unreadable: let Go look */
	close(fd);
	return found;
}

/*
 * The sandbox's cgroup, as cgroups.Manager.Create makes it for one v1
 * hierarchy, but without a state record: its name says whose it is
 * (sbe-PID-START-PIDNS-RANDOM), so that what a runtime killed before
 * removing it leaves behind can be judged from the name alone, by
 * cgroups.Manager.Sweep and by the next express spawn. A record is a file
 * made and removed on every spawn, which on a /run on disk cost an express
 * spawn more than any other step of its own.
 */
struct cg {
	char id[96];
	char leaf[PATH_MAX];
	int tasks;
	int have_leaf;
};

enum { CG_STALE = -2 };

static void cg_remove(const struct express *x, struct cg *c)
{
	if (c->tasks >= 0)
		close(c->tasks);
	c->tasks = -1;
	if (x->no_cgroup)
		return;
	if (c->have_leaf) {
		/* The PID namespace is gone with the init, so the cgroup is
		 * empty; the kernel may take a moment to drop its last task. */
		int r;
		for (int i = 0; (r = rmdir(c->leaf)) < 0 && errno == EBUSY && i < 200; i++) {
			struct timespec ts = {0, 1000000};
			nanosleep(&ts, NULL);
		}
		struct stat st;
		if (r < 0 && lstat(c->leaf, &st) == 0)
			return; /* left to a sweep, which its name guides */
	}
	/* Busy or not empty: another sandbox uses it, and the last one out
	 * removes it. */
	(void)rmdir(x->cg_dir);
}

/* cg_create makes the cgroup: 0, -1, or CG_STALE when the parent holds an
 * express cgroup of a runtime that is gone, which Go's sweep removes. */
static int cg_create(const struct express *x, struct cg *c)
{
	unsigned long long rnd = 0, start;
	*c = (struct cg){.tasks = -1};
	if (getrandom(&rnd, sizeof rnd, GRND_NONBLOCK) != sizeof rnd) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		rnd = (unsigned long long)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^ (unsigned long long)ts.tv_sec;
	}
	if (owner_start(&start, "/proc/self/stat") < 0)
		return -1;
	snprintf(c->id, sizeof c->id, EXPRESS_LEAF_PREFIX "%d-%llu-%llu-%016llx", (int)getpid(), start, x->self_ns, rnd);
	if (snprintf(c->leaf, sizeof c->leaf, "%s/%s", x->cg_dir, c->id) >= (int)sizeof c->leaf)
		return -1;
	/* Another runtime may remove the (empty) parent between the two
	 * mkdirs: make it again, as cgroups.Manager does. The last sandbox
	 * out removes the parent, so only one that is there already can hold
	 * what a killed runtime left. */
	int looked = 0;
	for (int i = 0; i < 20; i++) {
		if (mkdir(x->cg_dir, 0755) < 0) {
			if (errno != EEXIST)
				return -1;
			if (!looked++ && any_stale(x->cg_dir, x->self_ns, leaf_stale))
				return CG_STALE;
		}
		if (mkdir(c->leaf, 0755) == 0) {
			c->have_leaf = 1;
			break;
		}
		if (errno != ENOENT && errno != ENODEV)
			return -1;
	}
	char file[PATH_MAX + 16], val[32];
	snprintf(val, sizeof val, "%lld", x->pids_max);
	if (!c->have_leaf || snprintf(file, sizeof file, "%s/pids.max", c->leaf) >= (int)sizeof file ||
	    ar_write_text(file, val) < 0)
		return -1;
	snprintf(file, sizeof file, "%s/tasks", c->leaf);
	c->tasks = open(file, O_WRONLY | O_CLOEXEC);
	return c->tasks < 0 ? -1 : 0;
}

/* ---- after the release ---- */

/* json_str finds "key":"..." in a report and copies its value, unescaped
 * (a \u escape beyond ASCII becomes '?'), into out. */
static int json_str(const char *msg, const char *key, char *out, size_t n)
{
	char pat[32];
	snprintf(pat, sizeof pat, "\"%s\":\"", key);
	const char *s = strstr(msg, pat);
	if (!s || n == 0)
		return -1;
	s += strlen(pat);
	size_t o = 0;
	for (; *s && *s != '"' && o + 1 < n; s++) {
		char c = *s;
		if (c == '\\') {
			c = *++s;
			switch (c) {
			case 'n': c = '\n'; break;
			case 't': c = '\t'; break;
			case 'r': c = '\r'; break;
			case 'b': c = '\b'; break;
			case 'f': c = '\f'; break;
			case 'u': {
				unsigned v = 0;
				for (int i = 1; i <= 4; i++) {
					int d = s[i] ? ar_hexval(s[i] | 0x20) : -1;
					if (d < 0)
						return -1;
					v = v << 4 | (unsigned)d;
				}
				s += 4;
				c = v < 0x80 ? (char)v : '?';
				break;
			}
			case 0: return -1;
			default: break; /* '"', '\\', '/' */
			}
		}
		out[o++] = c;
	}
	out[o] = 0;
	return 0;
}

/* report_int is a report's "key":N, 0 when absent. */
static int report_int(const char *msg, const char *key)
{
	unsigned long long v;
	return json_u64(msg, key, &v) < 0 || v > INT_MAX ? 0 : (int)v;
}

/* read_report receives one report into buf; its type, or NULL at EOF. */
static const char *read_report(int sock, char *buf, size_t n)
{
	ssize_t r;
	int resets = 0;
	/* An init that died with our release unread makes the kernel report
	 * ECONNRESET once, ahead of the report it queued (nsinit's read). */
	do
		r = recv(sock, buf, n - 1, 0);
	while (r < 0 && (errno == EINTR || (errno == ECONNRESET && resets++ == 0)));
	if (r <= 0)
		return NULL;
	buf[r] = 0;
	if (strstr(buf, "{\"type\":\"started\"") == buf)
		return "started";
	if (strstr(buf, "{\"type\":\"exit\"") == buf)
		return "exit";
	if (strstr(buf, "{\"type\":\"error\"") == buf)
		return "error";
	return "other";
}

/* finish waits for the init (the command's status is its report, or the
 * init's own when it sent none), removes the cgroup and exits as the CLI
 * does. msg, when set, is a setup failure to print (exit 125). */
/* Go's names of the Linux signals (syscall.Signal.String). */
static const char *const go_signal_names[] = {
	[1] = "hangup", [2] = "interrupt", [3] = "quit", [4] = "illegal instruction",
	[5] = "trace/breakpoint trap", [6] = "aborted", [7] = "bus error",
	[8] = "floating point exception", [9] = "killed", [10] = "user defined signal 1",
	[11] = "segmentation fault", [12] = "user defined signal 2", [13] = "broken pipe",
	[14] = "alarm clock", [15] = "terminated", [16] = "stack fault", [17] = "child exited",
	[18] = "continued", [19] = "stopped (signal)", [20] = "stopped", [21] = "stopped (tty input)",
	[22] = "stopped (tty output)", [23] = "urgent I/O condition", [24] = "CPU time limit exceeded",
	[25] = "file size limit exceeded", [26] = "virtual timer expired",
	[27] = "profiling timer expired", [28] = "window changed", [29] = "I/O possible",
	[30] = "power failure", [31] = "bad system call",
};

static _Noreturn void finish(const struct express *x, struct cg *c, int pid, const char *msg, int have_exit, int code, int sig)
{
	siginfo_t si;
	int r;
	do
		r = waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT);
	while (r < 0 && errno == EINTR);
	/* No signal may reach the pid once it can be reaped. */
	ar_sigfwd_detach();
	int ws = 0;
	while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
		;
	cg_remove(x, c);
	if (msg) {
		char line[8192];
		if (!have_exit && r == 0) {
			if (WIFSIGNALED(ws)) {
				/* As Go's describeStatus: "signal: killed", with Go's
				 * names (syscall.Signal.String), not the C library's. */
				char name[64];
				int sig = WTERMSIG(ws);
				if (sig > 0 && sig < (int)(sizeof go_signal_names / sizeof go_signal_names[0]))
					snprintf(name, sizeof name, "%s", go_signal_names[sig]);
				else
					snprintf(name, sizeof name, "signal %d", sig);
				snprintf(line, sizeof line, "agentrun: sandbox setup failed at %s (signal: %s%s)\n", msg, name,
					 WCOREDUMP(ws) ? " (core dumped)" : "");
			}
			else
				snprintf(line, sizeof line, "agentrun: sandbox setup failed at %s (exit status %d)\n", msg, WEXITSTATUS(ws));
		} else {
			snprintf(line, sizeof line, "agentrun: sandbox setup failed at %s\n", msg);
		}
		(void)ar_write_all(2, line, strlen(line));
		_exit(AR_EXIT_SETUP_FAILED);
	}
	if (!have_exit) {
		/* No report: the init itself was killed. */
		if (WIFSIGNALED(ws))
			_exit(128 + WTERMSIG(ws));
		_exit(WEXITSTATUS(ws));
	}
	_exit(sig ? 128 + sig : code);
}

static _Noreturn void run(const struct express *x, struct cg *c, const struct ar_prestart *pre)
{
	/* Static: no stack probes over 25 KiB (cinit.c, big_locals). */
	static char buf[16384], step[256], err[4096], msg[4608];
	int pid = pre->pid, sock = pre->sock;
	/* The plan is this spawn's (await_verified in cinit.c), then the
	 * release with the cgroup's tasks file (await_release). A failed send
	 * means the init is gone; its report says why. */
	(void)send(sock, "v", 1, MSG_NOSIGNAL);
	struct iovec iov = {.iov_base = (void *)x->release, .iov_len = x->release_len};
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} ctl;
	memset(&ctl, 0, sizeof ctl);
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof ctl.b};
	if (c->tasks >= 0) {
		struct cmsghdr *h = CMSG_FIRSTHDR(&mh);
		h->cmsg_level = SOL_SOCKET;
		h->cmsg_type = SCM_RIGHTS;
		h->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(h), &c->tasks, sizeof(int));
	} else {
		/* No cgroup: the release alone, as Go sends it then. */
		mh.msg_control = NULL;
		mh.msg_controllen = 0;
	}
	ssize_t sent;
	do
		sent = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (sent < 0 && errno == EINTR);
	if (c->tasks >= 0)
		close(c->tasks);
	c->tasks = -1;
	/* The userns holders' exit, which the release did not wait for. */
	ar_prestart_reap_holders();

	const char *t = read_report(sock, buf, sizeof buf);
	if (!t) {
		/* EOF, or a socket error with the init perhaps still there. */
		kill(pid, SIGKILL);
		snprintf(msg, sizeof msg, "%s: init exited without a report", sent < 0 ? "sync" : "init");
		finish(x, c, pid, msg, 0, 0, 0);
	}
	if (strcmp(t, "error") == 0) {
		if (json_str(buf, "step", step, sizeof step) < 0 || json_str(buf, "error", err, sizeof err) < 0)
			snprintf(msg, sizeof msg, "init: malformed report");
		else
			snprintf(msg, sizeof msg, "%s: %s", step, err);
		/* The setup failed on what the fingerprints hold unchanged (a
		 * root template damaged in place, say): the next spawn goes the
		 * ordinary way, which checks, rebuilds or reports it. */
		(void)unlink(x->path);
		finish(x, c, pid, msg, 1, 0, 0);
	}
	if (strcmp(t, "exit") == 0) /* the command could not be started */
		finish(x, c, pid, NULL, 1, report_int(buf, "code"), report_int(buf, "signal"));
	if (strcmp(t, "started") != 0) {
		kill(pid, SIGKILL);
		finish(x, c, pid, "sync: unexpected report", 1, 0, 0);
	}
	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	ar_sigfwd_attach(pidfd, pid);
	/* The exit report, or EOF when the init itself was killed. */
	while ((t = read_report(sock, buf, sizeof buf)))
		if (strcmp(t, "exit") == 0)
			finish(x, c, pid, NULL, 1, report_int(buf, "code"), report_int(buf, "signal"));
	finish(x, c, pid, NULL, 0, 0, 0);
}

/* The record ar_express_open opened, for ar_express. */
static char express_path[PATH_MAX];

int ar_express_open(const char *dir, const char *name, uid_t euid, struct stat *st)
{
	const char *v = getenv("AGENTRUN_EXPRESS");
	if (v && (strcmp(v, "0") == 0 || strcmp(v, "off") == 0))
		return -1;
	char rname[64];
	if (snprintf(rname, sizeof rname, "%s%s", name, EXPRESS_SUFFIX) >= (int)sizeof rname ||
	    snprintf(express_path, sizeof express_path, "%s/%s", dir, rname) >= (int)sizeof express_path)
		return -1;
	int fd = ar_open_cached(dir, rname, euid, st);
	if (fd < 0)
		trace("off", "no record");
	return fd;
}

/* The record of this process's spawn: one per process, like the image. */
static struct express rec;

int ar_express_read(const struct ar_image *img, int fd, const struct stat *st, const unsigned char **rel, size_t *rel_len)
{
	static char text[EXPRESS_MAX];
	size_t len = (size_t)st->st_size;
	if (len >= sizeof text) {
		close(fd);
		trace("off", "record too large");
		return -1;
	}
	int rd = ar_read_all(fd, text, len);
	close(fd);
	/* Field by field: rec is static, so zero already, and a compound
	 * literal would clear its 32 KiB release buffer page by page. */
	rec.text = text;
	rec.len = len;
	memcpy(rec.path, express_path, sizeof rec.path);
	if (rd < 0 || parse(&rec) < 0 || rec.image_sum != img->checksum) {
		trace("off", "record not for this image");
		return -1;
	}
	*rel = rec.release;
	*rel_len = rec.release_len;
	return 0;
}

int ar_express(const struct ar_image *img, uid_t euid)
{
	/* Go lowers an rlimit above the hard limit this process holds, with
	 * a warning: a record exists only for plans it did not lower. */
	for (int i = 0; i < img->plan->nrlimits; i++) {
		struct rlimit rl;
		const struct ar_rlimit *pr = &img->plan->rlimits[i];
		if (getrlimit(pr->resource, &rl) < 0 || (rl.rlim_max != RLIM_INFINITY && pr->hard > rl.rlim_max)) {
			trace("off", pr->name);
			return 0;
		}
	}
	/* Every input of the plan as it was compiled. */
	char *at = rec.prints;
	for (char *line; (line = next_line(&rec, &at)) && strcmp(line, "end") != 0;) {
		const char *what = NULL;
		if (!check_print(line, &what)) {
			trace("off", what ? what : "bad fingerprint");
			return 0;
		}
	}
	/* What the Go side would sweep first, it must see. */
	struct stat ns;
	if (stat("/proc/self/ns/pid", &ns) < 0) {
		trace("off", "pid namespace");
		return 1;
	}
	rec.self_ns = (unsigned long long)ns.st_ino;
	/* A sandbox without a cgroup never made the state directory; one
	 * that is missing holds no records. */
	struct stat sd;
	int no_dir = rec.no_cgroup && lstat(rec.state_dir, &sd) < 0 && errno == ENOENT;
	if (!no_dir && (!private_dir(rec.state_dir, euid) || any_stale(rec.state_dir, rec.self_ns, record_stale))) {
		trace("off", "cgroup records to sweep");
		return 1;
	}
	static struct cg c;
	c.tasks = -1;
	int made = rec.no_cgroup ? 0 : cg_create(&rec, &c);
	if (made < 0) {
		cg_remove(&rec, &c);
		trace("off", made == CG_STALE ? "cgroups to sweep" : "cgroup");
		return 1;
	}
	/* From here on the signals belong to the command; until the init
	 * runs it, they are held. */
	if (ar_sigfwd_install(rec.sigs, rec.nsigs) < 0) {
		cg_remove(&rec, &c);
		trace("off", "signals");
		return 1;
	}
	struct ar_prestart pre = ar_prestart_take_express();
	if (pre.state != AR_PRESTART_STARTED) {
		ar_prestart_reap_holders();
		cg_remove(&rec, &c);
		ar_prestart_put_back(&pre);
		/* Signals that came meanwhile end the process as they would have
		 * before Go hooked them. */
		sigset_t held;
		sigemptyset(&held);
		for (int i = 0; i < rec.nsigs; i++)
			sigaddset(&held, rec.sigs[i]);
		sigprocmask(SIG_BLOCK, &held, NULL);
		ar_sigfwd_uninstall_raise();
		sigprocmask(SIG_UNBLOCK, &held, NULL);
		trace("off", "init not started");
		return 1;
	}
	trace("used", NULL);
	run(&rec, &c, &pre);
}
