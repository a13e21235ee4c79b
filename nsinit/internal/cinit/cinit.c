//go:build linux && cgo

/*
 * cinit.c: the sandbox init in C (contract in cinit.h).
 *
 * Rules for everything that runs in a cloned child: the child is a copy of
 * a multi-threaded Go process in which only the cloning thread survives, so
 * any lock another thread held (malloc, stdio, Go's runtime) stays held
 * forever. The child therefore only makes system calls, keeps its state on
 * its stack and reads the plan. glibc is used for thin system call wrappers
 * only; calls whose glibc wrappers coordinate threads (setresuid, setgroups
 * broadcast to every thread of the process and would wait forever) go
 * through syscall(2) directly.
 *
 * big_locals: the few large buffers (the fd and tree tables, the release
 * message, the command's stack) are static rather than on the stack. The
 * child is a process of its own, so its statics are its own copy, and it
 * runs child() once. On the stack they made child()'s frame 120 KiB, and
 * the compiler's stack-clash probes touched every page of it on entry: 29
 * page faults per spawn for memory mostly never used. As statics only the
 * pages actually written are faulted in.
 */
#define _GNU_SOURCE
#include "cinit.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/if.h>
#include <linux/keyctl.h>
#include <linux/mount.h>
#include <linux/netlink.h>
#include <linux/openat2.h>
#include <linux/rtnetlink.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <linux/sockios.h>

#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO('T', 0x41)
#endif

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef MNT_DETACH
#define MNT_DETACH 2
#endif

/*
 * The RLIMIT_NOFILE this process started with. Go's runtime raises the soft
 * limit to hard-1 at start-up and gives the original back to the programs
 * it executes (syscall/rlimit.go); the C init must do the same for the
 * command. A constructor runs before the Go runtime initialises, so it sees
 * the original. Written once, before any Go code runs; read-only after.
 */
static struct rlimit start_nofile;
static int start_nofile_ok;

/*
 * The argument and environment strings of this process, as the kernel laid
 * them out ([arg_start, arg_end) is what /proc/PID/cmdline shows). The
 * cloned init is a copy of this process, so without care the sandbox would
 * read the caller's command line at /proc/1/cmdline; the init overwrites its
 * copy (hide_cmdline). glibc passes argc, argv and envp to constructors;
 * under musl initial_args finds them.
 */
static char *arg_start, *arg_end, *env_end;

static void record_layout(int argc, char **argv, char **envp)
{
	if (argc <= 0 || !argv || !argv[0])
		return;
	/* Only a contiguous layout (the kernel's) can be overwritten safely. */
	char *end = argv[0];
	for (int i = 0; i < argc; i++) {
		if (argv[i] != end)
			return;
		end += strlen(argv[i]) + 1;
	}
	char *eend = end;
	for (char **e = envp; e && *e; e++) {
		if (*e != eend)
			break;
		eend += strlen(*e) + 1;
	}
	arg_start = argv[0];
	arg_end = end;
	env_end = eend;
}

extern char **environ;

/*
 * initial_args finds argc, argv and envp where a libc that calls
 * constructors without arguments (musl) left them: the kernel lays out
 * argc, argv[0..argc-1], NULL, envp[] on the initial stack, and environ
 * still points at that envp before main (nothing here changes it first).
 * Walking back from envp, the first slot whose value is the number of
 * pointers passed is argc: a string pointer is never that small.
 */
static int initial_args(int *argc, char ***argv, char ***envp)
{
	char **e = environ, here;
	/* The initial stack lies above every frame of the running thread. */
	if (!e || (uintptr_t)e <= (uintptr_t)&here || e[-1] != NULL)
		return -1;
	for (uintptr_t n = 0; (uintptr_t)(e - 2 - n) > (uintptr_t)&here; n++) {
		char **slot = e - 2 - n;
		if ((uintptr_t)*slot == n) {
			*argc = (int)n;
			*argv = slot + 1;
			*envp = e;
			return 0;
		}
	}
	return -1;
}

int ar_initial_args_agree(void)
{
	int argc;
	char **argv, **envp;
	if (initial_args(&argc, &argv, &envp) < 0 || argc < 1 || !arg_start)
		return 0;
	char *end = argv[argc - 1] + strlen(argv[argc - 1]) + 1;
	return argv[0] == arg_start && end == arg_end && envp == environ;
}

/* The process's arguments as its constructor found them (record_start). */
static int start_argc;
static char **start_argv, **start_envp;

/* AR_CTOR_INIT: before any constructor that may start an init (the CLI's
 * fast path runs at AR_CTOR_FASTPATH), which needs these records. */
__attribute__((constructor(AR_CTOR_INIT))) static void record_start(int argc, char **argv, char **envp)
{
	start_nofile_ok = getrlimit(RLIMIT_NOFILE, &start_nofile) == 0;
#ifndef __GLIBC__
	if (initial_args(&argc, &argv, &envp) < 0)
		return;
#endif
	record_layout(argc, argv, envp);
	if (argc > 0 && argv)
		start_argc = argc, start_argv = argv, start_envp = envp;
}

int ar_start_args(int *argc, char ***argv, char ***envp)
{
	if (!start_argv)
		return -1;
	*argc = start_argc;
	*argv = start_argv;
	*envp = start_envp;
	return 0;
}

/* hide_cmdline replaces the init's copy of the caller's arguments and
 * environment with "agentrun-init" and NULs, and names the task alike. */
static void hide_cmdline(void)
{
	static const char name[] = "agentrun-init";
	(void)prctl(PR_SET_NAME, name, 0, 0, 0);
	if (!arg_start)
		return;
	size_t n = (size_t)(arg_end - arg_start);
	memset(arg_start, 0, (size_t)(env_end - arg_start));
	/* The last byte stays NUL, so the kernel shows exactly this range. */
	memcpy(arg_start, name, n > sizeof name ? sizeof name : n - 1);
}

/* ---- reports: the JSON the Go parent parses, formatted by hand ---- */

struct out {
	char b[3072];
	size_t n;
};

static void put(struct out *o, const char *s)
{
	while (*s && o->n < sizeof o->b - 1)
		o->b[o->n++] = *s++;
}

static void put_int(struct out *o, long v)
{
	char d[24];
	int i = 0;
	unsigned long u = v < 0 ? -(unsigned long)v : (unsigned long)v;
	do {
		d[i++] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		d[i++] = '-';
	while (i > 0 && o->n < sizeof o->b - 1)
		o->b[o->n++] = d[--i];
}

/* OUT_RESERVE is kept free by put_str for what follows a string field (the
 * errno text, the closing quote and brace), so a long path is shortened
 * rather than cutting the report into invalid JSON. */
#define OUT_RESERVE 160

/* put_str appends s as the inside of a JSON string: quotes, backslashes and
 * control characters escaped, other bytes as they are. */
static void put_str(struct out *o, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (o->n + 7 >= sizeof o->b - OUT_RESERVE) {
			put(o, "...");
			return;
		}
		if (c == '"' || c == '\\') {
			o->b[o->n++] = '\\';
			o->b[o->n++] = (char)c;
		} else if (c < 0x20 || c == 0x7f) {
			memcpy(o->b + o->n, "\\u00", 4);
			o->b[o->n + 4] = hex[c >> 4];
			o->b[o->n + 5] = hex[c & 15];
			o->n += 6;
		} else {
			o->b[o->n++] = (char)c;
		}
	}
}

/* put_strs appends a NULL-terminated list of strings, escaped. */
static void put_strs(struct out *o, const char *const *parts)
{
	for (; *parts; parts++)
		put_str(o, *parts);
}

/* errstr names errno values the way Go's syscall.Errno does, so the
 * init's reports read like the parent's own errors. */
static const char *errstr(int e)
{
	switch (e) {
	case EPERM: return "operation not permitted";
	case ENOENT: return "no such file or directory";
	case ESRCH: return "no such process";
	case EINTR: return "interrupted system call";
	case EIO: return "input/output error";
	case ENXIO: return "no such device or address";
	case E2BIG: return "argument list too long";
	case ENOEXEC: return "exec format error";
	case EBADF: return "bad file descriptor";
	case ECHILD: return "no child processes";
	case EAGAIN: return "resource temporarily unavailable";
	case ENOMEM: return "cannot allocate memory";
	case EACCES: return "permission denied";
	case EFAULT: return "bad address";
	case EBUSY: return "device or resource busy";
	case EEXIST: return "file exists";
	case EXDEV: return "invalid cross-device link";
	case ENODEV: return "no such device";
	case ENOTDIR: return "not a directory";
	case EISDIR: return "is a directory";
	case EINVAL: return "invalid argument";
	case ENFILE: return "too many open files in system";
	case EMFILE: return "too many open files";
	case ENOTTY: return "inappropriate ioctl for device";
	case ETXTBSY: return "text file busy";
	case EFBIG: return "file too large";
	case ENOSPC: return "no space left on device";
	case EROFS: return "read-only file system";
	case EMLINK: return "too many links";
	case EPIPE: return "broken pipe";
	case ERANGE: return "numerical result out of range";
	case ENAMETOOLONG: return "file name too long";
	case ENOSYS: return "function not implemented";
	case ENOTEMPTY: return "directory not empty";
	case ELOOP: return "too many levels of symbolic links";
	case EOPNOTSUPP: return "operation not supported";
	case EUSERS: return "too many users";
	case EOVERFLOW: return "value too large for defined data type";
	case ENOBUFS: return "no buffer space available";
	case EAFNOSUPPORT: return "address family not supported by protocol";
	case EPROTONOSUPPORT: return "protocol not supported";
	}
	return NULL;
}

static void put_errno(struct out *o, int e)
{
	const char *s = errstr(e);
	if (s) {
		put(o, s);
		return;
	}
	put(o, "errno ");
	put_int(o, e);
}

/* ---- child state ---- */

/*
 * rawsys makes a system call and returns its result, -errno on failure,
 * without touching errno; raw_thread starts a thread without libc. Both
 * serve the loader thread (below), which shares init's thread pointer and
 * with it libc's errno: a write of errno there could land between a call
 * of init's that failed and init's test of errno (mkdirat's EEXIST in
 * mkdir_all_in, say). They exist for x86_64, the architecture this is
 * built and tested on; elsewhere init runs the loader's steps itself
 * (LOADER_THREAD 0) and rawsys is syscall(2). AR_NO_LOADER_THREAD builds
 * that way on x86_64 too, to test it.
 */
#if defined(__x86_64__) && !defined(AR_NO_LOADER_THREAD)
#define LOADER_THREAD 1
static long rawsys(long n, long a, long b, long c, long d, long e, long f)
{
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	long ret;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}

/* raw_thread starts fn(arg) in a thread of this process on the stack
 * that ends at top (16-byte aligned), and ends that thread with
 * exit(0) when fn returns. CLONE_PARENT_SETTID and CLONE_CHILD_CLEARTID
 * both use *tid. Returns the thread's id or -errno. */
static long raw_thread(void (*fn)(void *), void *arg, char *top, volatile pid_t *tid)
{
	register long r10 __asm__("r10") = (long)tid; /* child_tid */
	register long r8 __asm__("r8") = 0;           /* tls: none, so init's */
	register long r12 __asm__("r12") = (long)fn;
	register long r13 __asm__("r13") = (long)arg;
	long flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM |
		     CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID;
	long ret;
	/* The new thread starts on top with the parent's registers: r12 and
	 * r13 carry fn and arg across; it never returns into this frame. */
	__asm__ volatile("syscall\n\t"
			 "test %%rax, %%rax\n\t"
			 "jnz 1f\n\t"
			 "xor %%ebp, %%ebp\n\t"
			 "mov %%r13, %%rdi\n\t"
			 "call *%%r12\n\t"
			 "mov %[exit], %%eax\n\t"
			 "xor %%edi, %%edi\n\t"
			 "syscall\n\t"
			 "ud2\n"
			 "1:"
			 : "=a"(ret)
			 : "a"((long)SYS_clone), "D"(flags), "S"(top), "d"(tid), "r"(r10), "r"(r8), "r"(r12), "r"(r13),
			   [exit] "i"(SYS_exit)
			 : "rcx", "r11", "memory");
	return ret;
}
#else
#define LOADER_THREAD 0
static long rawsys(long n, long a, long b, long c, long d, long e, long f)
{
	long r = syscall(n, a, b, c, d, e, f);
	return r < 0 ? -errno : r;
}
#endif
#define RAW0(n) rawsys((n), 0, 0, 0, 0, 0, 0)
#define RAW(n, ...) rawsys_n((n), __VA_ARGS__)
#define rawsys_n(n, ...) rawsys_pad((n), __VA_ARGS__, 0, 0, 0, 0, 0, 0)
#define rawsys_pad(n, a, b, c, d, e, f, ...) rawsys((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))

struct ctx {
	const struct ar_plan *p;
	int sync; /* the sync socket; the parent's number until fds are arranged */
	int verified; /* await_verify: the parent's 'v' was read */
	/* Detail of a failed mount helper, e.g. "open source " + "/usr". */
	const char *what;
	const char *what_arg;
};

/* detail records what a helper was doing when it failed; returns -1 with
 * errno preserved so helpers can `return detail(...)`. */
static int detail(struct ctx *c, const char *what, const char *arg)
{
	int e = errno;
	c->what = what;
	c->what_arg = arg;
	errno = e;
	return -1;
}

static void send_msg(int sock, const struct out *o)
{
	/* MSG_NOSIGNAL: a parent that is gone must not kill us with SIGPIPE;
	 * there is nobody left to tell then. */
	(void)syscall(SYS_sendto, sock, o->b, o->n, MSG_NOSIGNAL, NULL, 0);
}

/* report_error sends {"type":"error","step":...,"error":...}; step and msg
 * are NULL-terminated lists of parts; err (if nonzero) ends the message. */
static void report_error(int sock, const char *const *step, const char *const *msg, int err)
{
	struct out o = {.n = 0};
	put(&o, "{\"type\":\"error\",\"step\":\"");
	put_strs(&o, step);
	put(&o, "\",\"error\":\"");
	put_strs(&o, msg);
	if (err) {
		if (msg[0])
			put(&o, ": ");
		put_errno(&o, err);
	}
	put(&o, "\"}");
	send_msg(sock, &o);
}

static _Noreturn void die_parts(struct ctx *c, const char *const *step, const char *const *msg, int err)
{
	report_error(c->sync, step, msg, err);
	_exit(AR_EXIT_SETUP_FAILED);
}

/* die reports step with errno's text and exits 125. */
static _Noreturn void die(struct ctx *c, const char *step)
{
	int e = errno;
	die_parts(c, (const char *[]){step, NULL}, (const char *[]){NULL}, e);
}

/* die_mount reports a failed mount step the way mounts.Error reads:
 * step "mount DEST", error "mounts: OP DEST: DETAIL: ERR". */
static _Noreturn void die_mount(struct ctx *c, const char *op, const char *dest)
{
	int e = errno;
	const char *w = c->what ? c->what : "";
	const char *wa = c->what_arg ? c->what_arg : "";
	const char *sep = c->what ? ": " : "";
	die_parts(c, (const char *[]){"mount ", dest, NULL},
		  (const char *[]){"mounts: ", op, " ", dest, sep, w, wa, NULL}, e);
}

static void close_keep_errno(int fd)
{
	int e = errno;
	close(fd);
	errno = e;
}

/* ---- file descriptors ---- */

/*
 * arrange_fds makes the plan's fds the child's 0..n-1 and closes every
 * other descriptor: the clone copied the Go parent's whole fd table, and a
 * resident init must not keep the caller's files open (no exec will close
 * them). Sources below their target index are first moved above every
 * source, so no dup3 clobbers a source that is still needed.
 */
static int arrange_fds(const struct ar_plan *p)
{
	int n = p->nfds;
	static int fd[AR_MAX_ENTRIES]; /* see big_locals */
	int next = n;
	for (int i = 0; i < n; i++) {
		fd[i] = p->fds[i];
		if (fd[i] >= next)
			next = fd[i] + 1;
	}
	for (int i = 0; i < n; i++) {
		if (fd[i] < i) {
			if (dup3(fd[i], next, O_CLOEXEC) < 0)
				return -1;
			fd[i] = next++;
		}
	}
	for (int i = 0; i < n; i++) {
		if (fd[i] == i) {
			/* Already in place; it must survive exec if it is stdio. */
			if (fcntl(i, F_SETFD, 0) < 0)
				return -1;
		} else if (dup3(fd[i], i, 0) < 0) {
			return -1;
		}
	}
	if (syscall(SYS_close_range, (unsigned)n, ~0U, 0) < 0)
		return -1;
	/* Everything but stdio closes when the command is executed. */
	if (n > 3 && syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
		return -1;
	return 0;
}

/* ---- paths inside the new root ---- */

/* open_in opens path under dirfd with openat2. */
static int open_in(int dirfd, const char *path, uint64_t flags, uint64_t resolve)
{
	struct open_how how = {.flags = flags | O_CLOEXEC, .resolve = resolve};
	return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

/* resolve_in opens p relative to rootfd as if rootfd were "/": symlinks and
 * ".." cannot leave it, and /proc magic links are refused. */
static int resolve_in(int rootfd, const char *p, uint64_t flags)
{
	while (*p == '/')
		p++;
	return open_in(rootfd, *p ? p : ".", flags, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
}

/* split copies the clean absolute path p into dir (its parent, "/" at the
 * top) and returns a pointer to its last component inside dir's buffer. */
static const char *split(const char *p, char dir[PATH_MAX])
{
	size_t n = strlen(p);
	if (n + 2 > PATH_MAX) { /* room for the extra NUL below */
		errno = ENAMETOOLONG;
		return NULL;
	}
	memcpy(dir, p, n + 1);
	char *slash = strrchr(dir, '/');
	if (!slash || !slash[1]) {
		errno = EINVAL;
		return NULL;
	}
	if (slash == dir) {
		/* "/name": the parent is the root; keep the name after a NUL. */
		memmove(dir + 2, dir + 1, n);
		dir[1] = 0;
		return dir + 2;
	}
	*slash = 0;
	return slash + 1;
}

/*
 * mkdir_all_in returns an O_PATH fd of directory p (clean, absolute) inside
 * rootfd, creating missing components. It finds the deepest existing
 * ancestor through resolve_in, then creates each component relative to its
 * resolved parent and re-opens it without following symlinks, so a symlink
 * planted between the two steps fails instead of redirecting the mount.
 */
static int mkdir_all_in(struct ctx *c, int rootfd, const char *p)
{
	char buf[PATH_MAX];
	size_t n = strlen(p);
	if (n >= PATH_MAX) {
		errno = ENAMETOOLONG;
		return detail(c, "mount point ", p);
	}
	if (strcmp(p, "/") == 0)
		return fcntl(rootfd, F_DUPFD_CLOEXEC, 0);
	int fd = resolve_in(rootfd, p, O_PATH | O_DIRECTORY);
	if (fd >= 0)
		return fd;
	if (errno != ENOENT)
		return detail(c, "mount point ", p);

	/* Walk up to the deepest ancestor that exists. */
	memcpy(buf, p, n + 1);
	size_t end = n; /* buf[0:end] is the prefix being tried */
	int pfd = -1;
	for (;;) {
		/* The next shorter prefix ends at the previous '/'. */
		do
			end--;
		while (end > 0 && buf[end] != '/');
		if (end == 0) {
			pfd = fcntl(rootfd, F_DUPFD_CLOEXEC, 0);
			break;
		}
		buf[end] = 0;
		pfd = resolve_in(rootfd, buf, O_PATH | O_DIRECTORY);
		buf[end] = '/';
		if (pfd >= 0)
			break;
		if (errno != ENOENT)
			return detail(c, "mount point ", p);
	}
	if (pfd < 0)
		return detail(c, "mount point ", p);

	/* Create and enter each missing component. */
	while (end < n) {
		size_t start = end + 1;
		size_t stop = start;
		while (stop < n && buf[stop] != '/')
			stop++;
		buf[stop] = 0;
		const char *name = buf + start;
		if (mkdirat(pfd, name, 0755) < 0 && errno != EEXIST) {
			close_keep_errno(pfd);
			return detail(c, "mkdir ", p);
		}
		fd = open_in(pfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW,
			     RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS);
		close_keep_errno(pfd);
		if (fd < 0)
			return detail(c, "mount point ", p);
		pfd = fd;
		if (stop < n)
			buf[stop] = '/';
		end = stop;
	}
	return pfd;
}

/* make_target returns an fd for the mount point p, creating a directory or
 * an empty file depending on what will be mounted there. */
static int make_target(struct ctx *c, int rootfd, const char *p, int dir)
{
	if (dir)
		return mkdir_all_in(c, rootfd, p);
	char parent[PATH_MAX];
	const char *base = split(p, parent);
	if (!base)
		return detail(c, "mount point ", p);
	int pfd = mkdir_all_in(c, rootfd, parent);
	if (pfd < 0)
		return -1;
	/* O_PATH first: opening an existing FIFO for reading would block, and
	 * the sandbox can plant one in the workspace to stall later spawns. */
	int fd = openat(pfd, base, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		fd = openat(pfd, base, O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	close_keep_errno(pfd);
	if (fd < 0)
		return detail(c, "mount point ", p);
	struct stat st;
	if (fstat(fd, &st) < 0 || S_ISLNK(st.st_mode) || S_ISDIR(st.st_mode)) {
		close(fd);
		errno = ENOTDIR;
		return detail(c, "mount point (not a file) ", p);
	}
	return fd;
}

/* ---- mounts: the root, from the plan's entries ---- */

static int set_attr(int tree, int recursive, uint64_t attr)
{
	struct mount_attr a = {.attr_set = attr};
	unsigned flags = AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0);
	return (int)syscall(SYS_mount_setattr, tree, "", flags, &a, sizeof a);
}

static int attach(struct ctx *c, int tree, int target)
{
	if (syscall(SYS_move_mount, tree, "", target, "",
		    MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
		return detail(c, "attach", NULL);
	return 0;
}

/* clone_bind makes a detached, configured clone of a bind source. */
static int clone_bind(struct ctx *c, const struct ar_mount *m)
{
	/* No symlink anywhere in the source: the compiler resolved it, so a
	 * symlink here was swapped in after the check. */
	int src = open_in(AT_FDCWD, m->source, O_PATH, RESOLVE_NO_SYMLINKS);
	if (src < 0)
		return detail(c, "open source ", m->source);
	unsigned flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH;
	if (m->recursive)
		flags |= AT_RECURSIVE;
	int tree = (int)syscall(SYS_open_tree, src, "", flags);
	close_keep_errno(src);
	if (tree < 0)
		return detail(c, "clone ", m->source);
	if (m->attr && set_attr(tree, m->recursive, m->attr) < 0) {
		close_keep_errno(tree);
		return detail(c, "set attributes on ", m->source);
	}
	return tree;
}

/* open_copy_source opens the source of a copy: no symlink in the path (the
 * compiler resolved them, as for binds), non-blocking so that a FIFO cannot
 * stall the setup, and it must be a regular file that anyone may read, since
 * the copy belongs to the sandbox user. */
static int open_copy_source(struct ctx *c, const char *src)
{
	int fd = open_in(AT_FDCWD, src, O_RDONLY | O_NONBLOCK | O_NOFOLLOW, RESOLVE_NO_SYMLINKS);
	if (fd < 0)
		return detail(c, "open source ", src);
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		errno = EINVAL;
		return detail(c, "copy source (not a regular file) ", src);
	}
	if (!(st.st_mode & S_IROTH)) {
		close(fd);
		errno = EACCES;
		return detail(c, "copy source (not readable by all) ", src);
	}
	return fd;
}

/* copy_in writes the content of src to a new file at p in the root, with
 * src's permission bits less set-id and group/other write bits. */
static int copy_in(struct ctx *c, int rootfd, int src, const char *p)
{
	char parent[PATH_MAX];
	const char *base = split(p, parent);
	if (!base)
		return detail(c, "copy to ", p);
	int pfd = mkdir_all_in(c, rootfd, parent);
	if (pfd < 0)
		return -1;
	/* O_EXCL: the root is fresh, so anything already there is a conflict. */
	int fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	close_keep_errno(pfd);
	if (fd < 0)
		return detail(c, "create ", p);
	struct stat st;
	if (fstat(src, &st) < 0) {
		close_keep_errno(fd);
		return detail(c, "stat source of ", p);
	}
	for (off_t left = st.st_size; left > 0;) {
		ssize_t n = sendfile(fd, src, NULL, (size_t)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			close_keep_errno(fd);
			return detail(c, "copy to ", p);
		}
		if (n == 0)
			break; /* the source shrank */
		left -= n;
	}
	if (fchmod(fd, st.st_mode & 0755) < 0) {
		close_keep_errno(fd);
		return detail(c, "chmod ", p);
	}
	close(fd);
	return 0;
}

/* attach_tree attaches a detached tree at dest, creating a directory or an
 * empty file as the mount point depending on what the tree's root is. */
static int attach_tree(struct ctx *c, int rootfd, int tree, const char *dest)
{
	struct stat st;
	if (fstat(tree, &st) < 0)
		return detail(c, "stat source", NULL);
	int target = make_target(c, rootfd, dest, S_ISDIR(st.st_mode));
	if (target < 0)
		return -1;
	int r = attach(c, tree, target);
	close_keep_errno(target);
	return r;
}

/* fs_mount creates a filesystem instance (tmpfs, proc, devpts...) and
 * attaches it at the destination. */
static int fs_mount(struct ctx *c, int rootfd, const struct ar_mount *m)
{
	int fsfd = (int)syscall(SYS_fsopen, m->source, FSOPEN_CLOEXEC);
	if (fsfd < 0)
		return detail(c, "fsopen ", m->source);
	for (int i = 0; i < m->nparams; i++) {
		const struct ar_fsparam *fp = &m->params[i];
		long r = fp->value
			? syscall(SYS_fsconfig, fsfd, FSCONFIG_SET_STRING, fp->key, fp->value, 0)
			: syscall(SYS_fsconfig, fsfd, FSCONFIG_SET_FLAG, fp->key, NULL, 0);
		if (r < 0) {
			close_keep_errno(fsfd);
			return detail(c, "option ", fp->key);
		}
	}
	if (syscall(SYS_fsconfig, fsfd, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) {
		close_keep_errno(fsfd);
		return detail(c, "create ", m->source);
	}
	int mfd = (int)syscall(SYS_fsmount, fsfd, FSMOUNT_CLOEXEC, (unsigned)m->attr);
	close_keep_errno(fsfd);
	if (mfd < 0)
		return detail(c, "fsmount ", m->source);
	int target = mkdir_all_in(c, rootfd, m->dest);
	if (target < 0) {
		close_keep_errno(mfd);
		return -1;
	}
	int r = attach(c, mfd, target);
	close_keep_errno(target);
	close_keep_errno(mfd);
	return r;
}

static int symlink_in(struct ctx *c, int rootfd, const char *target, const char *p)
{
	char parent[PATH_MAX];
	const char *base = split(p, parent);
	if (!base)
		return detail(c, "symlink ", p);
	int pfd = mkdir_all_in(c, rootfd, parent);
	if (pfd < 0)
		return -1;
	int r = symlinkat(target, pfd, base);
	close_keep_errno(pfd);
	if (r < 0)
		return detail(c, "symlink ", p);
	return 0;
}

/* mask_path hides p: files get /dev/null bound over them, directories an
 * empty read-only tmpfs. Paths that do not exist are fine. */
static int mask_path(struct ctx *c, int rootfd, int null, const char *p)
{
	int target = resolve_in(rootfd, p, O_PATH | O_NOFOLLOW);
	if (target < 0)
		return errno == ENOENT ? 0 : detail(c, "open", NULL);
	struct stat st;
	int tree = -1, r = -1;
	if (fstat(target, &st) < 0) {
		detail(c, "stat", NULL);
		goto out;
	}
	if (S_ISDIR(st.st_mode)) {
		int fsfd = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
		if (fsfd < 0) {
			detail(c, "fsopen tmpfs", NULL);
			goto out;
		}
		if (syscall(SYS_fsconfig, fsfd, FSCONFIG_SET_STRING, "size", "0", 0) < 0 ||
		    syscall(SYS_fsconfig, fsfd, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) {
			close_keep_errno(fsfd);
			detail(c, "create tmpfs", NULL);
			goto out;
		}
		tree = (int)syscall(SYS_fsmount, fsfd, FSMOUNT_CLOEXEC,
				    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
		close_keep_errno(fsfd);
		if (tree < 0) {
			detail(c, "fsmount tmpfs", NULL);
			goto out;
		}
	} else {
		tree = (int)syscall(SYS_open_tree, null, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
		if (tree < 0) {
			detail(c, "clone /dev/null", NULL);
			goto out;
		}
		if (set_attr(tree, 0, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC) < 0) {
			detail(c, "set attributes", NULL);
			goto out;
		}
	}
	r = attach(c, tree, target);
out:
	if (tree >= 0)
		close_keep_errno(tree);
	close_keep_errno(target);
	return r;
}

/* readonly_path stacks a read-only clone of p over itself. */
static int readonly_path(struct ctx *c, int rootfd, const char *p)
{
	int target = resolve_in(rootfd, p, O_PATH | O_NOFOLLOW);
	if (target < 0)
		return errno == ENOENT ? 0 : detail(c, "open", NULL);
	int r = -1;
	int tree = (int)syscall(SYS_open_tree, target, "",
				OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
	if (tree < 0) {
		detail(c, "clone", NULL);
	} else if (set_attr(tree, 1, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC) < 0) {
		detail(c, "set attributes", NULL);
	} else {
		r = attach(c, tree, target);
	}
	if (tree >= 0)
		close_keep_errno(tree);
	close_keep_errno(target);
	return r;
}

/* is_root: m binds the root template as the root (mounts.RootTemplate). */
static int is_root(const struct ar_mount *m)
{
	return m->kind == AR_MOUNT_BIND && strcmp(m->type, AR_TYPE_ROOT_TEMPLATE) == 0;
}

/* clone_template clones the root template (mounts.cloneTemplate), opened
 * by its path: only a mount of this namespace clones. The parent passed
 * the template's lock file, locked; that fd stays open, close on exec, for
 * the init's life and keeps sweeps away. */
static int clone_template(struct ctx *c, const struct ar_mount *m)
{
	struct stat st;
	if (m->fd < 0 || fstat(m->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		errno = EBADF;
		return detail(c, "no template lock from the parent", NULL);
	}
	int src = open_in(AT_FDCWD, m->source, O_PATH | O_DIRECTORY, RESOLVE_NO_SYMLINKS);
	if (src < 0)
		return detail(c, "open ", m->source);
	int tree = (int)syscall(SYS_open_tree, src, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
	close_keep_errno(src);
	if (tree < 0)
		return detail(c, "clone", NULL);
	if (set_attr(tree, 0, m->attr | MOUNT_ATTR_RDONLY) < 0) {
		close_keep_errno(tree);
		return detail(c, "set attributes", NULL);
	}
	return tree;
}

/* under_bind reports whether dest is, or lies inside, the destination of
 * one of the first n mounts that attach host trees: making its mount point
 * would write to a host filesystem. */
static int under_bind(const struct ar_plan *p, int n, const char *dest)
{
	for (int i = 0; i < n; i++) {
		const struct ar_mount *m = &p->mounts[i];
		/* The root template is read-only and has every mount point
		 * already: nothing can be created in it. */
		if (m->kind != AR_MOUNT_BIND || is_root(m))
			continue;
		size_t l = strlen(m->dest);
		if (l > 0 && strncmp(dest, m->dest, l) == 0 && (dest[l] == 0 || dest[l] == '/' || m->dest[l - 1] == '/'))
			return 1;
	}
	return 0;
}

/* The loader thread ("the loader", below) reads the sync socket from the
 * moment it starts; init waits for its state instead. */
enum { LOADER_STARTED, LOADER_VERIFIED, LOADER_LOADED, LOADER_GO, LOADER_DONE };
static void await_loader(int state);

/* await_verified blocks a prestarted init until the parent has found the
 * plan to be its own: the loader has read the parent's 'v'. */
static void await_verified(struct ctx *c)
{
	if (!c->p->await_verify || c->verified)
		return;
	await_loader(LOADER_VERIFIED);
	c->verified = 1;
}

/* setup_root assembles the root on a fresh tmpfs, or on the root template,
 * and pivots into it. */
static void setup_root(struct ctx *c)
{
	const struct ar_plan *p = c->p;
	static int trees[AR_MAX_ENTRIES], devs[AR_MAX_ENTRIES]; /* see big_locals */
	int null = -1;

	/* Nothing we mount may propagate anywhere, and later host mounts must
	 * not appear inside. */
	if (syscall(SYS_mount, "", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		die_mount(c, "make-rprivate", "/");

	/* Every host source is cloned before the staging tmpfs exists, so no
	 * source path is resolved after that mount could shadow it. */
	for (int i = 0; i < p->nmounts; i++) {
		const struct ar_mount *m = &p->mounts[i];
		trees[i] = -1;
		if (m->kind == AR_MOUNT_COPY) {
			trees[i] = open_copy_source(c, m->source);
			if (trees[i] < 0)
				die_mount(c, "copy", m->dest);
			continue;
		}
		if (m->kind != AR_MOUNT_BIND)
			continue;
		if (is_root(m)) {
			if (i != 0 || (trees[i] = clone_template(c, m)) < 0)
				die_mount(c, "root template", "/");
			continue;
		}
		if (m->fd >= 0) {
			trees[i] = m->fd; /* configured by the parent; attached as is */
			continue;
		}
		trees[i] = clone_bind(c, m);
		if (trees[i] < 0)
			die_mount(c, "bind", m->dest);
	}
	for (int i = 0; i < p->ndevices; i++) {
		const struct ar_device *d = &p->devices[i];
		devs[i] = (int)syscall(SYS_open_tree, AT_FDCWD, d->path,
				       OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW);
		if (devs[i] < 0 || set_attr(devs[i], 0, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC) < 0) {
			detail(c, "clone host ", d->path);
			die_mount(c, "device", d->dest);
		}
	}
	if (p->nmasked > 0) {
		null = open("/dev/null", O_PATH | O_CLOEXEC);
		if (null < 0)
			die_mount(c, "mask", "/dev/null");
	}

	/* The staging root: a path of the private mount namespace only. */
	int templated = p->nmounts > 0 && is_root(&p->mounts[0]);
	if (templated) {
		int at = open("/tmp", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (at < 0 || attach(c, trees[0], at) < 0)
			die_mount(c, "root template", "/");
		close(at);
		close(trees[0]);
	} else if (syscall(SYS_mount, "tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m,nr_inodes=4096") < 0) {
		die_mount(c, "mount tmpfs root", "/");
	}
	int rootfd = open("/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		die_mount(c, "open root", "/");

	for (int i = templated; i < p->nmounts; i++) {
		const struct ar_mount *m = &p->mounts[i];
		int r;
		c->what = c->what_arg = NULL;
		if (under_bind(p, i, m->dest))
			await_verified(c);
		switch (m->kind) {
		case AR_MOUNT_BIND:
			r = attach_tree(c, rootfd, trees[i], m->dest);
			close(trees[i]);
			break;
		case AR_MOUNT_FS:
			r = fs_mount(c, rootfd, m);
			break;
		case AR_MOUNT_SYMLINK:
			r = symlink_in(c, rootfd, m->source, m->dest);
			break;
		case AR_MOUNT_COPY:
			r = copy_in(c, rootfd, trees[i], m->dest);
			close(trees[i]);
			break;
		default:
			errno = EINVAL;
			r = detail(c, "unsupported mount type ", m->type);
		}
		if (r < 0)
			die_mount(c, m->type, m->dest);
	}
	for (int i = 0; i < p->ndevices; i++) {
		c->what = c->what_arg = NULL;
		if (under_bind(p, p->nmounts, p->devices[i].dest))
			await_verified(c);
		int r = attach_tree(c, rootfd, devs[i], p->devices[i].dest);
		close(devs[i]);
		if (r < 0)
			die_mount(c, "device", p->devices[i].dest);
	}
	for (int i = 0; i < p->nmasked; i++) {
		c->what = c->what_arg = NULL;
		if (under_bind(p, p->nmounts, p->masked[i]))
			await_verified(c);
		if (mask_path(c, rootfd, null, p->masked[i]) < 0)
			die_mount(c, "mask", p->masked[i]);
	}
	if (null >= 0)
		close(null);
	for (int i = 0; i < p->nreadonly; i++) {
		c->what = c->what_arg = NULL;
		if (readonly_path(c, rootfd, p->readonly[i]) < 0)
			die_mount(c, "readonly", p->readonly[i]);
	}

	c->what = c->what_arg = NULL;
	if (fchdir(rootfd) < 0)
		die_mount(c, "chdir", "/");
	close(rootfd);
	/* pivot_root(".", ".") stacks the old root on top of the new one;
	 * finish_root detaches it, so no path to the host tree remains. */
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		die_mount(c, "pivot_root", "/");
}

/* finish_root detaches the old root that pivot_root stacked on the new
 * one, then enters the new root and makes it read-only. Nothing may
 * resolve a path between setup_root and this. */
static void finish_root(struct ctx *c)
{
	if (syscall(SYS_umount2, ".", MNT_DETACH) < 0)
		die_mount(c, "detach old root", "/");
	if (chdir("/") < 0)
		die_mount(c, "chdir", "/");
	if (c->p->root_readonly) {
		struct mount_attr a = {.attr_set = MOUNT_ATTR_RDONLY};
		if (syscall(SYS_mount_setattr, AT_FDCWD, "/", 0, &a, sizeof a) < 0)
			die_mount(c, "remount read-only", "/");
	}
}

/* ---- network ---- */

/* loopback_up sets IFF_UP on ifindex 1 ("lo") with one RTM_NEWLINK on the
 * NETLINK_ROUTE socket nl, in the network namespace the socket was made
 * in. Returns 0 or -errno; errno is left alone (rawsys). */
static int loopback_up(int nl)
{
	struct {
		struct nlmsghdr nh;
		struct ifinfomsg ifi;
	} req = {
		.nh = {.nlmsg_len = sizeof req, .nlmsg_type = RTM_NEWLINK,
		       .nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK, .nlmsg_seq = 1},
		.ifi = {.ifi_family = AF_UNSPEC, .ifi_index = 1, .ifi_flags = IFF_UP, .ifi_change = IFF_UP},
	};
	struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
	union {
		struct nlmsghdr nh;
		char b[512];
	} ack;
	long n = RAW(SYS_sendto, nl, &req, sizeof req, 0, &kernel, sizeof kernel);
	if (n >= 0)
		n = RAW(SYS_recvfrom, nl, &ack, sizeof ack, 0, NULL, NULL);
	if (n < 0)
		return (int)n;
	if ((size_t)n < sizeof(struct nlmsghdr) + sizeof(struct nlmsgerr) || ack.nh.nlmsg_type != NLMSG_ERROR)
		return -EPROTO;
	const struct nlmsgerr *ne = NLMSG_DATA(&ack.nh);
	return ne->error; /* 0 or -errno */
}

/* route_socket opens a NETLINK_ROUTE socket: fd or -errno. */
static int route_socket(void)
{
	return (int)RAW(SYS_socket, AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
}

/* ---- capabilities ---- */

static int capset_all(uint32_t eff0, uint32_t eff1, uint32_t prm0, uint32_t prm1)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2] = {
		{.effective = eff0, .permitted = prm0},
		{.effective = eff1, .permitted = prm1},
	};
	return (int)syscall(SYS_capset, &h, d);
}

/* keep_only_granted leaves exactly the plan's granted capabilities in the
 * effective, permitted and inheritable sets and raises them as ambient. */
static int keep_only_granted(const struct ar_plan *p)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2];
	for (int i = 0; i < 2; i++)
		d[i] = (struct __user_cap_data_struct){
			.effective = p->keep_caps[i], .permitted = p->keep_caps[i], .inheritable = p->keep_caps[i]};
	if (syscall(SYS_capset, &h, d) < 0)
		return -1;
	for (int cap = 0; cap < 64; cap++)
		if ((p->keep_caps[cap / 32] >> (cap % 32)) & 1 &&
		    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) < 0)
			return -1;
	return 0;
}

/* raise_effective makes the effective set equal to the permitted set. A
 * setresuid away from uid 0 of the namespace clears the effective set even
 * with keep-caps; when uid 0 is not mapped (agentrun's own specs) nothing is
 * cleared and this is a no-op. */
static int raise_effective(void)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) < 0)
		return -1;
	if (d[0].effective == d[0].permitted && d[1].effective == d[1].permitted)
		return 0;
	return capset_all(d[0].permitted, d[1].permitted, d[0].permitted, d[1].permitted);
}

/* ---- the command ---- */

/* How the command child ended before execve, written into init's memory
 * (the child shares it until execve); kind 0 means execve succeeded. */
struct exec_msg {
	int32_t kind; /* EXEC_EXITED: exit with code; EXEC_REPORTED: error sent */
	int32_t code;
};
enum { EXEC_EXITED = 1, EXEC_REPORTED = 2 };

/* What init hands to the command child. */
struct command_arg {
	struct ctx *c;
	const char *path; /* argv[0] resolved */
	volatile struct exec_msg *m;
};

/* say writes parts to fd 2. Through syscall(2): serve mode calls it
 * after forget_parent (see exit_now). */
static void say(const char *const *parts)
{
	struct out o = {.n = 0};
	for (; *parts; parts++)
		put(&o, *parts);
	(void)syscall(SYS_write, 2, o.b, o.n);
}

/* command_fail reports a failed step of the command child itself, then
 * tells init that it did so. */
static _Noreturn void command_fail(const struct command_arg *a, const char *step, const char *what)
{
	int e = errno;
	report_error(a->c->sync, (const char *[]){step, NULL}, (const char *[]){what, NULL}, e);
	a->m->code = AR_EXIT_SETUP_FAILED;
	a->m->kind = EXEC_REPORTED;
	_exit(AR_EXIT_SETUP_FAILED);
}

static _Noreturn void command_exit(const struct command_arg *a, int code)
{
	a->m->code = code;
	a->m->kind = EXEC_EXITED;
	_exit(code);
}

/* ar_strlen and ar_strchr are strlen and strchr without glibc, for code
 * that runs after forget_parent. */
static size_t ar_strlen(const char *s)
{
	const char *e = s;
	while (*e)
		e++;
	return (size_t)(e - s);
}

static const char *ar_strchr(const char *s, char c)
{
	for (; *s; s++)
		if (*s == c)
			return s;
	return NULL;
}

/* look_path resolves argv[0] with the command's PATH, inside the new root,
 * like a shell: 0 and the path to execute in *found (name itself
 * when it has a slash, else out), or the shell-style status (127 not found,
 * 126 not executable).
 * It runs in serve mode's exec'd children too, after forget_parent:
 * glibc only through syscall(2), no string functions of its. */
static int look_path(const char *name, const char *path, char out[PATH_MAX], const char **found)
{
	size_t nlen = ar_strlen(name);
	*found = name;
	if (ar_strchr(name, '/'))
		return 0; /* execve judges it */
	*found = out;
	int denied = 0;
	const char *dir = path;
	for (;;) {
		const char *end = ar_strchr(dir, ':');
		size_t dlen = end ? (size_t)(end - dir) : ar_strlen(dir);
		const char *d = dlen ? dir : ".";
		size_t l = dlen ? dlen : 1;
		if (l + 1 + nlen < PATH_MAX) {
			memcpy(out, d, l);
			out[l] = '/';
			memcpy(out + l + 1, name, nlen + 1);
			struct stat st;
			if (syscall(SYS_newfstatat, AT_FDCWD, out, &st, 0) == 0 && !S_ISDIR(st.st_mode)) {
				if (syscall(SYS_faccessat, AT_FDCWD, out, X_OK) == 0)
					return 0;
				denied = 1;
			}
		}
		if (!end)
			break;
		dir = end + 1;
	}
	return denied ? 126 : 127;
}

/* send_listener passes the seccomp listener fd to the parent. */
static int send_listener(int sock, int fd)
{
	static const char msg[] = "{\"type\":\"seccomp-listener\"}";
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} ctl;
	memset(&ctl, 0, sizeof ctl);
	struct iovec iov = {.iov_base = (void *)msg, .iov_len = sizeof msg - 1};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof ctl.b};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof fd);
	return sendmsg(sock, &mh, MSG_NOSIGNAL) < 0 ? -1 : 0;
}

/*
 * run_command is the command child: everything is in place (privileges
 * dropped, filter loaded, path resolved), it only executes the command. It
 * runs in init's memory (CLONE_VM|CLONE_VFORK, on its own stack) while init
 * waits: copying the address space, which is a copy of the whole Go parent,
 * would cost more than everything else here. A failed execve is reported
 * through the exec_msg.
 */
static int run_command(void *arg)
{
	const struct command_arg *a = arg;
	const struct ar_plan *p = a->c->p;
	uint64_t none = 0;

	/* A new program starts with no blocked signals. */
	if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, sizeof none) < 0)
		command_fail(a, "start command", "unblock signals");
	execve(a->path, p->argv, p->envp);
	int e = errno;
	const char *es = errstr(e);
	say((const char *[]){"agentrun: ", p->argv[0], ": fork/exec ", a->path, ": ", es ? es : "exec failed", "\n", NULL});
	command_exit(a, e == ENOENT ? 127 : 126);
}

/* The release message (cinit.h), received into init's stack. */
struct release {
	union {
		uint32_t flags;
		char b[AR_RELEASE_MAX];
	} u;
	size_t len;
	int ntasks; /* v1 "tasks" files sent with it, still open */
	int tasks[AR_MAX_TASK_FDS];
};

/* await_release blocks until the parent has placed init in its cgroup and
 * compiled the filter. EOF: the parent gave up. The message may carry v1
 * "tasks" files (SCM_RIGHTS) when init was started before its cgroup
 * existed (a prestart). They are kept open in r: writing "0" to one moves
 * only the calling thread, so each of init's threads joins by itself
 * (join_release_cgroups). Runs in the loader. */
static void await_release(struct ctx *c, struct release *r)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int) * AR_MAX_TASK_FDS)];
	} ctl;
	struct iovec iov = {.iov_base = r->u.b, .iov_len = sizeof r->u.b};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof ctl.b};
	long n = RAW(SYS_recvmsg, c->sync, &mh, MSG_TRUNC | MSG_CMSG_CLOEXEC);
	if (n == 0)
		_exit(AR_EXIT_SETUP_FAILED);
	if (n < 0)
		die_parts(c, (const char *[]){"sync", NULL}, (const char *[]){NULL}, (int)-n);
	if ((size_t)n > sizeof r->u.b || n < 4 || (n - 4) % sizeof(struct sock_filter) || (mh.msg_flags & MSG_CTRUNC)) {
		die_parts(c, (const char *[]){"sync", NULL}, (const char *[]){"bad release message", NULL}, EPROTO);
	}
	r->ntasks = 0;
	for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); h; h = CMSG_NXTHDR(&mh, h)) {
		if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
			continue;
		int nfd = (int)((h->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		int fds[AR_MAX_TASK_FDS];
		memcpy(fds, CMSG_DATA(h), sizeof(int) * (size_t)(nfd < AR_MAX_TASK_FDS ? nfd : AR_MAX_TASK_FDS));
		for (int i = 0; i < nfd && i < AR_MAX_TASK_FDS; i++) {
			if (r->ntasks < AR_MAX_TASK_FDS)
				r->tasks[r->ntasks++] = fds[i];
			else
				(void)RAW(SYS_close, fds[i]);
		}
	}
	r->len = (size_t)n;
}

/* join_release_cgroups moves the calling thread into the cgroups the
 * release named; the last of init's threads to join also closes the
 * files. Each thread joins as soon as it may: the loader before it loads
 * the filter, so that the program's memory is charged to the sandbox
 * (after it, when it preloaded the filter: loader_preload). */
static void join_release_cgroups(struct ctx *c, struct release *r, int last)
{
	for (int i = 0; i < r->ntasks; i++) {
		long n = RAW(SYS_write, r->tasks[i], "0", 1);
		if (n != 1)
			die_parts(c, (const char *[]){"cgroup placement", NULL}, (const char *[]){NULL},
				  n < 0 ? (int)-n : EIO);
		if (last)
			(void)RAW(SYS_close, r->tasks[i]);
	}
	if (last)
		r->ntasks = 0;
}

/* drop_bounding clears the ambient set and drops every capability the
 * command is not granted from the bounding set. Neither takes anything
 * from the capabilities init holds, so it runs first thing, while init
 * waits for its go, instead of on the way to the command; every thread
 * init starts after it inherits the smaller bounding set. */
static void drop_bounding(struct ctx *c)
{
	const char *what = NULL;
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		what = "clear ambient capabilities";
	for (int cap = 0; !what; cap++) {
		if (cap < 64 && (c->p->keep_caps[cap / 32] >> (cap % 32)) & 1)
			continue; /* granted (--cap-add) */
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0)
			continue;
		if (errno == EINVAL)
			break; /* past the kernel's last capability */
		what = "drop bounding capability";
	}
	if (what) {
		int e = errno;
		die_parts(c, (const char *[]){"drop privileges", NULL}, (const char *[]){what, NULL}, e);
	}
}

/* drop_privileges runs in init right before it forks the command, so both
 * hold the result with drop_bounding's: no ambient or bounding capability
 * beyond the granted ones, and no_new_privs. Nothing can be regained
 * through setuid binaries or file capabilities. */
static void drop_privileges(struct ctx *c)
{
	if (c->p->no_new_privs && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		int e = errno;
		die_parts(c, (const char *[]){"drop privileges", NULL}, (const char *[]){"set no_new_privs", NULL}, e);
	}
}

/* ---- the loader ---- */

/*
 * The loader is a second thread of init, and the net thread a third. They
 * take two pieces of kernel work off the spawn's critical path; on a
 * machine with a second CPU they run alongside init's root assembly:
 *
 *  - the network namespace: creating one sets up every protocol's
 *    per-namespace state (0.6-0.8 ms here), and a clone with CLONE_NEWNET
 *    does it before init can start. The net thread unshares one instead,
 *    brings "lo" up in it and ends; init joins it with setns once the root
 *    is built. It is owned by the sandbox's user namespace either way; init
 *    builds the root in the host's network namespace, where it holds no
 *    capability. A plan that mounts sysfs keeps CLONE_NEWNET (split_net):
 *    sysfs shows the network devices of its mounter's namespace.
 *  - the seccomp filter: loading one is the kernel's translation, JIT and
 *    action cache (0.4-0.5 ms for the default profile), in the loading
 *    thread. The loader receives the release, loads the filter on itself
 *    and waits. Once init has done every step the filter may forbid, the
 *    loader adds a filter that allows everything with
 *    SECCOMP_FILTER_FLAG_TSYNC: the kernel gives init the loader's filters
 *    (the strictest action of all wins, so the released filter decides)
 *    and no_new_privs, and the loader ends. Before the load it drops its
 *    capabilities to the command's and sets no_new_privs as the plan says,
 *    so the kernel judges the load as it would judge init's. With an
 *    express record the filter is known before the release
 *    (ar_plan.early_release): the loader loads it at its start, while
 *    the parent checks the record, and hands it over only if the release
 *    that comes is the same message (loader_preload).
 *
 * The handover makes system calls under the released filter that loading
 * it in init would not: the loader's futex, seccomp and exit, and init's
 * futex, getpid, tgkill and sched_yield while it waits for the loader to
 * be gone. A filter that does not allow each of them whatever its
 * arguments (handover_allowed) is loaded by init itself after the loader
 * has gone, as is any filter when init already ran under one (TSYNC would
 * then not apply the filter's speculation mitigations to init). A
 * preloaded filter also sees the loader receive 'v' and the release, join
 * the cgroups and, on a failure, report it (early_allowed); one that does
 * not allow those is not preloaded.
 *
 * The loader reads the sync socket from its start ('v', then the release);
 * init waits for its state, and for the net thread's. Both threads share
 * init's memory, files, root and thread pointer (and so libc's errno,
 * which rawsys leaves alone). Each ends either by returning, or by taking
 * the whole process down (die_parts, _exit): init's waits for them cannot
 * outlast them, and both are gone before the filter reaches init (TSYNC
 * would otherwise filter the net thread too). Without LOADER_THREAD
 * there is no thread: init runs the steps that receive the messages itself
 * (await_loader), the clone keeps CLONE_NEWNET and init loads the filter.
 */
struct loader {
	struct ctx c; /* a copy: the sync socket and the plan */
	struct release *rel;
	int threaded;   /* a thread of its own (LOADER_THREAD), else init runs the steps */
	int split_net;  /* create the network namespace here */
	int unfiltered; /* init ran under no filter when it started */
	int handover;   /* the filter is loaded here and handed over */
	int early;      /* the plan's early_release was loaded before the release came */
	unsigned handover_flags; /* of the hand-over's allow-all filter */
	int netfd;      /* the new network namespace; -1: none */
	long listener;  /* the handed-over filter's listener; -1: none */
	volatile int state; /* LOADER_*, a futex word */
	volatile pid_t tid; /* 0 once the thread is leaving (CLONE_CHILD_CLEARTID) */
	pid_t id;           /* its thread id */
	/* The network namespace has a thread of its own (split_net), so that
	 * the filter's load need not wait for it: see start_loader. */
	struct ctx net_c;       /* the net thread's copy */
	int net_inline;         /* no net thread: init makes the namespace */
	volatile int net_done;  /* 1 once netfd is set, a futex word */
	volatile pid_t net_tid; /* as tid, for the net thread */
	pid_t net_id;
};

/* One loader per init process; a static, like big_locals, and so is its
 * stack. */
static struct loader loader;
#if LOADER_THREAD
enum { loader_stack_size = 64 * 1024 };
static _Alignas(64) char loader_stack[loader_stack_size];
static _Alignas(64) char net_stack[loader_stack_size];
#endif

/* split_net says whether the loader creates the network namespace. */
static int split_net(const struct ar_plan *p)
{
	if (!LOADER_THREAD || !(p->clone_flags & CLONE_NEWNET))
		return 0;
	for (int i = 0; i < p->nmounts; i++)
		if (p->mounts[i].kind == AR_MOUNT_FS && strcmp(p->mounts[i].source, "sysfs") == 0)
			return 0;
	return 1;
}

#if defined(__x86_64__)
#define NATIVE_AUDIT_ARCH AUDIT_ARCH_X86_64
#endif

/* A system call as a filter sees it, with the arguments that are known in
 * advance; the others (addresses, ids) are not. */
struct known_call {
	uint32_t nr;
	unsigned known; /* bit i: args[i] is known */
	uint64_t args[6];
};

/* filter_allows says whether the filter returns SECCOMP_RET_ALLOW for the
 * call on the native architecture, whatever its unknown arguments and
 * instruction pointer are. It runs the instructions that libseccomp emits
 * to decide by number, architecture and argument values (the kernel's
 * action-cache test, seccomp_is_const_allow, with known arguments too);
 * any other instruction, or a load of an unknown value, answers no. */
static int filter_allows(const struct sock_filter *f, size_t n, uint32_t arch, const struct known_call *c)
{
	uint32_t a = 0;
	for (size_t pc = 0; pc < n; pc++) {
		const struct sock_filter *i = &f[pc];
		switch (i->code) {
		case BPF_LD | BPF_W | BPF_ABS:
			if (i->k == offsetof(struct seccomp_data, nr)) {
				a = c->nr;
			} else if (i->k == offsetof(struct seccomp_data, arch)) {
				a = arch;
			} else if (i->k >= offsetof(struct seccomp_data, args) && i->k < sizeof(struct seccomp_data) &&
				   i->k % 4 == 0) {
				uint32_t off = i->k - (uint32_t)offsetof(struct seccomp_data, args);
				if (!(c->known & (1u << (off / 8))))
					return 0;
				uint64_t v = c->args[off / 8];
				/* The kernel's struct is in host order: on a
				 * little-endian host the low word comes first. */
				int high = off % 8 == 4;
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
				high = !high;
#endif
				a = high ? (uint32_t)(v >> 32) : (uint32_t)v;
			} else {
				return 0; /* the instruction pointer */
			}
			break;
		case BPF_JMP | BPF_JA:
			pc += i->k;
			break;
		case BPF_JMP | BPF_JEQ | BPF_K:
			pc += a == i->k ? i->jt : i->jf;
			break;
		case BPF_JMP | BPF_JGE | BPF_K:
			pc += a >= i->k ? i->jt : i->jf;
			break;
		case BPF_JMP | BPF_JGT | BPF_K:
			pc += a > i->k ? i->jt : i->jf;
			break;
		case BPF_JMP | BPF_JSET | BPF_K:
			pc += (a & i->k) ? i->jt : i->jf;
			break;
		case BPF_ALU | BPF_AND | BPF_K:
			a &= i->k;
			break;
		case BPF_RET | BPF_K:
			return i->k == SECCOMP_RET_ALLOW;
		default:
			return 0;
		}
	}
	return 0;
}

#ifdef NATIVE_AUDIT_ARCH
/* allows_each says whether the filter allows each of the n calls. */
static int allows_each(const struct sock_filter *f, size_t n, const struct known_call *calls, size_t ncalls)
{
	for (size_t i = 0; i < ncalls; i++)
		if (!filter_allows(f, n, NATIVE_AUDIT_ARCH, &calls[i]))
			return 0;
	return 1;
}
#endif

/* handover_allowed says whether the filter allows every system call the
 * handover makes under it (see the comment above struct loader). */
static int handover_allowed(const struct sock_filter *f, size_t n, unsigned handover_flags)
{
#ifdef NATIVE_AUDIT_ARCH
	const struct known_call calls[] = {
		/* the loader */
		{SYS_futex, 1u << 1, {0, FUTEX_WAKE_PRIVATE}},
		{SYS_futex, 1u << 1, {0, FUTEX_WAIT_PRIVATE}},
		{SYS_seccomp, 3u, {SECCOMP_SET_MODE_FILTER, handover_flags}},
		{SYS_exit, 1u, {0}},
		{SYS_exit_group, 0, {0}}, /* die_parts, should the hand-over fail */
		/* init, until the loader is gone */
		{SYS_futex, 1u << 1, {0, FUTEX_WAIT}},
		{SYS_getpid, 0x3f, {0}},
		{SYS_tgkill, 1u << 2, {0, 0, 0}},
		{SYS_sched_yield, 0x3f, {0}},
	};
	return allows_each(f, n, calls, sizeof calls / sizeof calls[0]);
#else
	(void)f;
	(void)n;
	(void)handover_flags;
	return 0;
#endif
}

#if LOADER_THREAD
/* early_allowed says whether the filter allows every system call the
 * loader makes under a preloaded filter until the release is in
 * (loader_verify, await_release, join_release_cgroups, loader_release),
 * and the error report of die_parts on the way: a thread killed there
 * would leave init waiting for it. */
static int early_allowed(const struct sock_filter *f, size_t n, int sync)
{
#ifdef NATIVE_AUDIT_ARCH
	const struct known_call calls[] = {
		{SYS_recvfrom, 0x3du, {(uint64_t)sync, 0, 1, MSG_TRUNC, 0, 0}},
		{SYS_recvmsg, 1u | 1u << 2, {(uint64_t)sync, 0, MSG_TRUNC | MSG_CMSG_CLOEXEC}},
		{SYS_write, 1u << 2, {0, 0, 1}},
		{SYS_close, 0, {0}},
		{SYS_sendto, 0x39u, {(uint64_t)sync, 0, 0, MSG_NOSIGNAL, 0, 0}},
	};
	return allows_each(f, n, calls, sizeof calls / sizeof calls[0]);
#else
	(void)f;
	(void)n;
	(void)sync;
	return 0;
#endif
}
#endif

int ar_filter_allows(const void *filter, size_t n, uint32_t nr, unsigned known, const uint64_t *args)
{
#ifdef NATIVE_AUDIT_ARCH
	struct known_call c = {.nr = nr, .known = known};
	memcpy(c.args, args, sizeof c.args);
	return filter_allows(filter, n, NATIVE_AUDIT_ARCH, &c);
#else
	(void)filter, (void)n, (void)nr, (void)known, (void)args;
	return 0;
#endif
}

int ar_handover_allowed(const void *filter, size_t n, unsigned flags)
{
	return handover_allowed(filter, n, flags);
}

/* word_set stores v in a futex word and wakes its waiter; word_wait
 * blocks until the word is at least v. */
static void word_set(volatile int *w, int v)
{
	__atomic_store_n(w, v, __ATOMIC_RELEASE);
	(void)RAW(SYS_futex, w, FUTEX_WAKE_PRIVATE, 1);
}

static void word_wait(volatile int *w, int v)
{
	for (;;) {
		int s = __atomic_load_n(w, __ATOMIC_ACQUIRE);
		if (s >= v)
			return;
		(void)RAW(SYS_futex, w, FUTEX_WAIT_PRIVATE, s, NULL);
	}
}

static void loader_set(int state) { word_set(&loader.state, state); }

/* loader_wait blocks until the loader's state is at least state. */
static void loader_wait(int state) { word_wait(&loader.state, state); }

static void loader_verify(struct loader *l);
static void loader_release(struct loader *l);

/* await_loader is init's side of loader_wait; without a thread, init runs
 * the steps up to state itself. */
static void await_loader(int state)
{
	if (loader.threaded) {
		loader_wait(state);
		return;
	}
	if (state >= LOADER_VERIFIED && loader.state < LOADER_VERIFIED)
		loader_verify(&loader);
	if (state >= LOADER_LOADED && loader.state < LOADER_LOADED)
		loader_release(&loader);
}

/* seccomp_load loads the filter of a release message (len bytes at b)
 * with flags: the listener, 0, or -errno. */
static long seccomp_load(const unsigned char *b, size_t len, unsigned flags)
{
	struct sock_fprog prog = {
		.len = (unsigned short)((len - 4) / sizeof(struct sock_filter)),
		.filter = (struct sock_filter *)(b + 4),
	};
	return RAW(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
}

static void load_filter(struct ctx *c, const struct release *rel, unsigned flags, long *listener)
{
	long r = seccomp_load((const unsigned char *)rel->u.b, rel->len, flags);
	if (r < 0)
		die_parts(c, (const char *[]){"seccomp", NULL}, (const char *[]){"load filter", NULL}, (int)-r);
	*listener = flags & SECCOMP_FILTER_FLAG_NEW_LISTENER ? r : -1;
}

/* The loader's steps; the thread runs them in order, or init runs them
 * itself (await_loader) when there is no thread. */
static void loader_net(struct loader *l)
{
	struct ctx *c = &l->net_c;
	long r;
	if ((r = RAW(SYS_unshare, CLONE_NEWNET)) < 0)
		die_parts(c, (const char *[]){"network namespace", NULL}, (const char *[]){NULL}, (int)-r);
	int nl = route_socket();
	if (nl < 0)
		die_parts(c, (const char *[]){"network namespace", NULL}, (const char *[]){"netlink socket", NULL}, -nl);
	if (c->p->loopback && (r = loopback_up(nl)) < 0)
		die_parts(c, (const char *[]){"loopback up", NULL}, (const char *[]){NULL}, (int)-r);
	/* The namespace's fd from the socket made in it: no path to resolve,
	 * and no /proc that must show this thread. */
	if ((r = RAW(SYS_ioctl, nl, SIOCGSKNS)) < 0)
		die_parts(c, (const char *[]){"network namespace", NULL}, (const char *[]){"open", NULL}, (int)-r);
	l->netfd = (int)r;
	(void)RAW(SYS_close, nl);
}

static void loader_verify(struct loader *l)
{
	if (l->c.p->await_verify) {
		char v;
		long r = RAW(SYS_recvfrom, l->c.sync, &v, 1, MSG_TRUNC, NULL, NULL);
		if (r != 1 || v != 'v')
			_exit(AR_EXIT_SETUP_FAILED);
	}
	loader_set(LOADER_VERIFIED);
}

/* The steps of loader_load, as die_parts names them. */
static const char *const load_steps[][2] = {
	{"drop privileges", "set capability sets"},
	{"drop privileges", "set no_new_privs"},
	{"seccomp", "load filter"},
};

/* loader_load loads the release message's filter (len bytes at b) on the
 * loader alone, with the command's capabilities and no_new_privs, as the
 * kernel would judge init's own load; init is still building the root.
 * Returns 0, or -errno with *step the load_steps entry that failed. */
static int loader_load(struct loader *l, const unsigned char *b, size_t len, int *step)
{
	const struct ar_plan *p = l->c.p;
	long r;
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2];
	for (int i = 0; i < 2; i++)
		d[i] = (struct __user_cap_data_struct){.effective = p->keep_caps[i], .permitted = p->keep_caps[i]};
	*step = 0;
	if ((r = RAW(SYS_capset, &h, d)) < 0)
		return (int)r;
	*step = 1;
	if (p->no_new_privs && (r = RAW(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) < 0)
		return (int)r;
	uint32_t flags;
	memcpy(&flags, b, sizeof flags);
	*step = 2;
	if ((r = seccomp_load(b, len, flags & ~(unsigned)(SECCOMP_FILTER_FLAG_TSYNC | SECCOMP_FILTER_FLAG_TSYNC_ESRCH))) < 0)
		return (int)r;
	l->listener = flags & SECCOMP_FILTER_FLAG_NEW_LISTENER ? r : -1;
	return 0;
}

#if LOADER_THREAD
/* loader_preload loads the plan's early_release before the parent has
 * checked anything, when the loader could hand it over and the steps it
 * takes under it until the release (early_allowed) are allowed. The
 * filter only restricts the loader, so loading one that never gets used
 * (another release, no 'v') costs nothing but the load; a load that
 * fails leaves the release to the ordinary steps, which report it if it
 * is the release's own filter. Its program's memory is charged to the
 * caller's memory cgroup, not the sandbox's, which the loader joins only
 * with the release: a fixed few pages. Runs in the loader thread alone. */
static void loader_preload(struct loader *l)
{
	const struct ar_plan *p = l->c.p;
	const unsigned char *b = p->early_release;
	size_t len = p->early_release_len;
	if (!l->unfiltered || !b || len <= 4 || len > AR_RELEASE_MAX || (len - 4) % sizeof(struct sock_filter))
		return;
	uint32_t flags;
	memcpy(&flags, b, sizeof flags);
	const struct sock_filter *f = (const struct sock_filter *)(b + 4);
	size_t n = (len - 4) / sizeof(struct sock_filter);
	unsigned hf = SECCOMP_FILTER_FLAG_TSYNC | (flags & SECCOMP_FILTER_FLAG_SPEC_ALLOW);
	if (!handover_allowed(f, n, hf) || !early_allowed(f, n, l->c.sync))
		return;
	int step;
	l->early = loader_load(l, b, len, &step) == 0;
}
#endif

static void loader_release(struct loader *l)
{
	struct ctx *c = &l->c;
	struct release *rel = l->rel;
	await_release(c, rel);
	l->handover_flags = SECCOMP_FILTER_FLAG_TSYNC | (rel->u.flags & SECCOMP_FILTER_FLAG_SPEC_ALLOW);
	if (l->early) {
		/* Handed over only if it is the filter that came; otherwise the
		 * loader leaves without one and init loads the release's. */
		const struct ar_plan *p = c->p;
		l->handover = rel->len == p->early_release_len && memcmp(rel->u.b, p->early_release, rel->len) == 0;
		if (!l->handover && l->listener >= 0) {
			(void)RAW(SYS_close, l->listener);
			l->listener = -1;
		}
	}
	join_release_cgroups(c, rel, 0);
	if (!l->early) {
		l->handover = l->threaded && rel->len > 4 && l->unfiltered &&
			      handover_allowed((const struct sock_filter *)(rel->u.b + 4),
					       (rel->len - 4) / sizeof(struct sock_filter), l->handover_flags);
		int step;
		long r;
		if (l->handover && (r = loader_load(l, (const unsigned char *)rel->u.b, rel->len, &step)) < 0)
			die_parts(c, (const char *[]){load_steps[step][0], NULL}, (const char *[]){load_steps[step][1], NULL},
				  (int)-r);
	}
	loader_set(LOADER_LOADED);
}

#if LOADER_THREAD
static void loader_main(void *arg)
{
	struct loader *l = arg;
	loader_preload(l);
	loader_verify(l);
	loader_release(l);
	loader_wait(LOADER_GO);
	if (l->handover) {
		static const struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
		struct sock_fprog prog = {.len = 1, .filter = (struct sock_filter *)&allow};
		/* TSYNC's failure is the id of a thread it could not
		 * synchronise: init, which would then run unfiltered. The
		 * flags are the ones handover_allowed checked. */
		long r = RAW(SYS_seccomp, SECCOMP_SET_MODE_FILTER, l->handover_flags, &prog);
		if (r != 0)
			die_parts(&l->c, (const char *[]){"seccomp", NULL}, (const char *[]){"hand the filter over", NULL},
				  r < 0 ? (int)-r : EBUSY);
	}
	/* No wake: init waits for this thread's exit (end_loader_thread). The
	 * thread ends with exit(0) (raw_thread). */
	__atomic_store_n(&l->state, LOADER_DONE, __ATOMIC_RELEASE);
}
#endif

#if LOADER_THREAD
/* net_main is the net thread: it makes the network namespace and ends. */
static void net_main(void *arg)
{
	struct loader *l = arg;
	loader_net(l);
	word_set(&l->net_done, 1);
}
#endif

/* start_loader starts the loader and, with split_net, the net thread.
 * The two pieces of work are independent: the namespace can be made at
 * once, the filter only once the release has come. Apart, the filter
 * loads on whichever CPU is free instead of waiting for the namespace
 * while init, done with the root, sits idle. The net thread goes on
 * another CPU than init's if the affinity mask allows one: the scheduler
 * would otherwise queue it behind init, where it runs only when init
 * blocks. */
static void start_loader(struct ctx *c, struct release *rel)
{
	loader = (struct loader){.c = *c, .rel = rel, .split_net = split_net(c->p), .netfd = -1, .listener = -1};
	loader.c.what = loader.c.what_arg = NULL;
	loader.net_c = loader.c;
	loader.unfiltered = RAW(SYS_prctl, PR_GET_SECCOMP, 0, 0, 0, 0) == 0;
#if LOADER_THREAD
	long t = raw_thread(loader_main, &loader, loader_stack + loader_stack_size, &loader.tid);
	if (t < 0)
		die_parts(c, (const char *[]){"start loader thread", NULL}, (const char *[]){NULL}, (int)-t);
	loader.threaded = 1;
	loader.id = (pid_t)t;
	if (!loader.split_net)
		return;
	/* Second, so that it alone misses a tight pids.max (a cgroup v2
	 * init is cloned into its cgroup): init then makes the namespace
	 * itself (await_net). */
	t = raw_thread(net_main, &loader, net_stack + loader_stack_size, &loader.net_tid);
	if (t < 0) {
		loader.net_inline = 1;
		return;
	}
	loader.net_id = (pid_t)t;
	cpu_set_t set;
	unsigned cpu;
	if (RAW(SYS_sched_getaffinity, 0, sizeof set, &set) > 0 && RAW(SYS_getcpu, &cpu, NULL, NULL) == 0 &&
	    cpu < CPU_SETSIZE && CPU_ISSET(cpu, &set) && CPU_COUNT(&set) > 1) {
		CPU_CLR(cpu, &set);
		(void)RAW(SYS_sched_setaffinity, t, sizeof set, &set); /* only speed is at stake */
	}
#endif
}

/* wait_thread_gone waits until the thread with *tid (CLONE_CHILD_CLEARTID)
 * and id has left this thread group: the kernel clears the tid and wakes
 * (a shared futex) early in the thread's exit, and releases the thread,
 * with its pids charge, a little later; from then on tgkill no longer
 * finds it. */
static void wait_thread_gone(volatile pid_t *tid, pid_t id)
{
	for (;;) {
		pid_t t = *tid;
		if (t == 0)
			break;
		(void)RAW(SYS_futex, tid, FUTEX_WAIT, t, NULL);
	}
	long self = RAW0(SYS_getpid);
	while (RAW(SYS_tgkill, self, id, 0) == 0)
		(void)RAW0(SYS_sched_yield);
}

/* await_net waits for the net thread's namespace and for the thread to be
 * gone (see end_loader_thread for why gone). */
static void await_net(void)
{
	if (!loader.split_net)
		return;
	if (loader.net_inline) {
		loader_net(&loader);
		return;
	}
	word_wait(&loader.net_done, 1);
	wait_thread_gone(&loader.net_tid, loader.net_id);
}

/* end_loader_thread hands the filter over (or lets the thread go without
 * one) and waits until the thread is gone: PID 1 is a single thread again
 * before the command starts, and the thread no longer counts against the
 * cgroup's pids.max (with a limit of 2 a remnant would refuse the
 * command's fork now and then). */
static void end_loader_thread(struct ctx *c)
{
	loader_set(LOADER_GO);
	wait_thread_gone(&loader.tid, loader.id);
	if (__atomic_load_n(&loader.state, __ATOMIC_ACQUIRE) != LOADER_DONE)
		die_parts(c, (const char *[]){"loader thread", NULL}, (const char *[]){"ended early", NULL}, 0);
}

/* finish_loader runs once init has done everything the filter may forbid:
 * the filter is handed over by the loader, or loaded by init itself. */
static void finish_loader(struct ctx *c, const struct release *rel)
{
	if (loader.threaded)
		end_loader_thread(c);
	long listener = loader.listener;
	if (!loader.handover && rel->len > 4) {
		unsigned flags = rel->u.flags;
		if ((flags & SECCOMP_FILTER_FLAG_TSYNC) && (flags & SECCOMP_FILTER_FLAG_NEW_LISTENER))
			flags |= SECCOMP_FILTER_FLAG_TSYNC_ESRCH;
		load_filter(c, rel, flags, &listener);
	}
	/* Whoever holds the listener decides the notified calls, never the
	 * sandbox: it goes to the parent. */
	if (listener >= 0) {
		int e = send_listener(c->sync, (int)listener) < 0 ? errno : 0;
		close((int)listener);
		if (e)
			die_parts(c, (const char *[]){"seccomp listener", NULL}, (const char *[]){NULL}, e);
	}
}

/* The signals init passes on to the command. SIGCHLD is for reaping. */
static const int forwarded[] = {
	SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT, SIGALRM,
};

static void report_exit(int sock, int code, int sig)
{
	struct out o = {.n = 0};
	put(&o, "{\"type\":\"exit\",\"code\":");
	put_int(&o, code);
	if (sig) {
		put(&o, ",\"signal\":");
		put_int(&o, sig);
	}
	put(&o, "}");
	send_msg(sock, &o);
}

/* exit_now ends init. After forget_parent, init calls glibc only through
 * syscall(2): a dynamically linked build may not have resolved a function
 * it never called before, and the resolver's memory may be gone. */
static _Noreturn void exit_now(int code)
{
	for (;;)
		(void)syscall(SYS_exit_group, code);
}

/*
 * init_loop is PID 1 after the command started: it forwards signals, reaps
 * every child and, once the command is gone, reports and exits with the
 * command's status, which takes everything left in the PID namespace down.
 */
static _Noreturn void init_loop(int sync, int sfd, pid_t cmd)
{
	for (;;) {
		struct pollfd pf[2] = {{.fd = sfd, .events = POLLIN}, {.fd = sync, .events = 0}};
		if (syscall(SYS_ppoll, pf, 2, NULL, NULL, 0) < 0) {
			if (errno == EINTR)
				continue;
			report_exit(sync, 255, 0);
			exit_now(255);
		}
		/* The parent is gone (its end of the socket closed): nobody is
		 * left to wait for the sandbox, so it ends now. */
		if (pf[1].revents & (POLLHUP | POLLERR))
			exit_now(AR_EXIT_SETUP_FAILED);
		if (!(pf[0].revents & POLLIN))
			continue;
		struct signalfd_siginfo si[8];
		long n = syscall(SYS_read, sfd, si, sizeof si);
		if (n < 0)
			continue;
		int reap = 0;
		for (size_t i = 0; i < (size_t)n / sizeof si[0]; i++) {
			if (si[i].ssi_signo == SIGCHLD)
				reap = 1;
			else
				(void)syscall(SYS_kill, cmd, (int)si[i].ssi_signo);
		}
		if (!reap)
			continue;
		for (;;) {
			int st;
			long pid = syscall(SYS_wait4, -1, &st, WNOHANG, NULL);
			if (pid == 0)
				break;
			if (pid < 0) {
				if (errno == EINTR)
					continue;
				report_exit(sync, 255, 0);
				exit_now(255);
			}
			if (pid != cmd)
				continue; /* an orphan PID 1 inherited */
			if (WIFSIGNALED(st)) {
				report_exit(sync, 0, WTERMSIG(st));
				exit_now(128 + WTERMSIG(st));
			}
			report_exit(sync, WEXITSTATUS(st), 0);
			exit_now(WEXITSTATUS(st));
		}
	}
}

/* ---- serve mode: a session's init ---- */

/*
 * In serve mode the init has no command of its own. Once it is confined
 * exactly as a command would be (credentials, capabilities, bounding set,
 * no_new_privs, filter, cgroup, namespaces, rlimits), it serves the
 * parent's requests on the sync socket: it forks a child per exec, which
 * inherits all of that, signals them, and reaps them and every orphan.
 * It runs after forget_parent: glibc only through syscall(2) (exit_now),
 * nothing on the heap, bounded static tables. No request may end it: a
 * bad one gets an error reply and its fds are closed. It ends when the
 * parent hangs up, and the kernel then ends the PID namespace.
 */

/* The exec'd children not reaped yet; see big_locals. */
static struct {
	pid_t pid;
	uint64_t id;
} serve_tab[AR_SERVE_MAX];
static int serve_n;
static unsigned char req_buf[AR_REQ_MAX];
static const char *req_slots[AR_REQ_MAX_STRINGS + 2];

/* The most fds one request may come with: more are an error. */
#define REQ_FDS 8

static const char *ar_memchr0(const char *p, const char *end)
{
	for (; p < end; p++)
		if (!*p)
			return p;
	return NULL;
}

int ar_parse_req(const void *buf, size_t len, int nfds, struct ar_parsed_req *r, const char **slots, size_t nslots,
		 const char **why)
{
	struct ar_req h;
	*r = (struct ar_parsed_req){0};
	if (len < sizeof h) {
		*why = "truncated header";
		return -EPROTO;
	}
	memcpy(&h, buf, sizeof h);
	r->id = h.id;
	r->type = h.type;
	r->target = h.target;
	r->flags = h.flags;
	r->sig = h.sig;
	r->winsize = h.winsize;
	if (h.magic != AR_REQ_MAGIC || (h.winsize && !(h.type == AR_REQ_EXEC && (h.flags & AR_EXEC_TTY)))) {
		*why = "bad magic";
		return -EPROTO;
	}
	if (len > AR_REQ_MAX) {
		*why = "too long";
		return -E2BIG;
	}
	if ((uint64_t)sizeof h + h.strings_len != len) {
		*why = "length does not match";
		return -EPROTO;
	}
	switch (h.type) {
	case AR_REQ_EXEC: {
		uint32_t fdbits = h.flags & (AR_EXEC_FD0 | AR_EXEC_FD1 | AR_EXEC_FD2);
		int want = (fdbits & 1) + ((fdbits >> 1) & 1) + ((fdbits >> 2) & 1);
		/* A terminal is the whole stdio: no fd with it. */
		if ((h.flags != fdbits && h.flags != AR_EXEC_TTY) || h.sig) {
			*why = "bad flags";
			return -EINVAL;
		}
		if (nfds != want) {
			*why = "fd count does not match the flags";
			return -EPROTO;
		}
		if (h.argc < 1) {
			*why = "no argv";
			return -EINVAL;
		}
		if ((uint64_t)h.argc + h.envc > AR_REQ_MAX_STRINGS || (uint64_t)h.argc + h.envc + 2 > nslots) {
			*why = "too many strings";
			return -E2BIG;
		}
		const char *p = (const char *)buf + sizeof h, *end = p + h.strings_len;
		const char *fixed[2];
		size_t n = 0;
		for (uint64_t i = 0; i < 2 + (uint64_t)h.argc + h.envc; i++) {
			const char *z = ar_memchr0(p, end);
			if (!z) {
				*why = "strings truncated";
				return -EPROTO;
			}
			if (i < 2)
				fixed[i] = p;
			else
				slots[n++] = p;
			if (i == 1 + (uint64_t)h.argc)
				slots[n++] = NULL; /* argv ends */
			p = z + 1;
		}
		if (p != end) {
			*why = "bytes after the strings";
			return -EPROTO;
		}
		slots[n] = NULL;
		r->cwd = fixed[0];
		r->path = fixed[1];
		r->argv = slots;
		r->envp = slots + h.argc + 1;
		if (!r->argv[0][0]) {
			*why = "empty argv[0]";
			return -EINVAL;
		}
		return 0;
	}
	case AR_REQ_SIGNAL:
	case AR_REQ_SIGNAL_ALL:
		if (h.argc || h.envc || h.strings_len || nfds) {
			*why = "a signal takes no strings or fds";
			return -EPROTO;
		}
		if (h.flags & ~(uint32_t)(h.type == AR_REQ_SIGNAL ? AR_SIG_GROUP : 0)) {
			*why = "bad flags";
			return -EINVAL;
		}
		if (h.sig < 0 || h.sig > 64) {
			*why = "bad signal";
			return -EINVAL;
		}
		return 0;
	}
	*why = "unknown request type";
	return -EPROTO;
}

static void put_u64(struct out *o, uint64_t v)
{
	char d[24];
	int i = 0;
	do {
		d[i++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (i > 0 && o->n < sizeof o->b - 1)
		o->b[o->n++] = d[--i];
}

/* reply_head starts {"type":TYPE,"id":ID. */
static void reply_head(struct out *o, const char *type, uint64_t id)
{
	o->n = 0;
	put(o, "{\"type\":\"");
	put(o, type);
	put(o, "\",\"id\":");
	put_u64(o, id);
}

/* send_reply sends o, with fd (SCM_RIGHTS) unless it is -1. */
static void send_reply2(int sock, const struct out *o, int fd, int fd2);

static void send_reply(int sock, const struct out *o, int fd)
{
	send_reply2(sock, o, fd, -1);
}

/* send_reply2 sends o with fd and fd2, those of them that are not -1. */
static void send_reply2(int sock, const struct out *o, int fd, int fd2)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(2 * sizeof(int))];
	} ctl;
	struct iovec iov = {.iov_base = (void *)o->b, .iov_len = o->n};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	int fds[2], n = 0;
	if (fd >= 0)
		fds[n++] = fd;
	if (fd2 >= 0)
		fds[n++] = fd2;
	if (n > 0) {
		for (size_t i = 0; i < sizeof ctl.b; i++)
			ctl.b[i] = 0;
		mh.msg_control = ctl.b;
		mh.msg_controllen = CMSG_SPACE((size_t)n * sizeof(int));
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, (size_t)n * sizeof(int));
	}
	/* A parent that is gone gets nothing; the next poll sees it. */
	(void)syscall(SYS_sendmsg, sock, &mh, MSG_NOSIGNAL);
}

static void reply_error(int sock, uint64_t id, const char *step, const char *arg, const char *msg, int err)
{
	struct out o;
	reply_head(&o, "exec-error", id);
	put(&o, ",\"step\":\"");
	put_str(&o, step);
	if (arg) {
		put(&o, " ");
		put_str(&o, arg);
	}
	put(&o, "\",\"errno\":");
	put_int(&o, err);
	put(&o, ",\"error\":\"");
	if (msg) {
		put_str(&o, msg);
		put(&o, ": ");
	}
	put_errno(&o, err);
	put(&o, "\"}");
	send_reply(sock, &o, -1);
}

static void reply_ack(int sock, uint64_t id, int err)
{
	struct out o;
	reply_head(&o, "ack", id);
	put(&o, ",\"errno\":");
	put_int(&o, err);
	put(&o, "}");
	send_reply(sock, &o, -1);
}

static void close_fds(const int *fds, int n)
{
	for (int i = 0; i < n; i++)
		(void)syscall(SYS_close, fds[i]);
}

/* What an exec'd child failed at before its execve, sent over its
 * CLOEXEC pipe: EOF instead means execve ran (or the child exited with
 * the shell's 126/127 after its lookup, a normal exit). */
struct exec_fail {
	int32_t step, err;
};
enum { XF_SETSID = 1, XF_STDIO, XF_CLOSE, XF_CHDIR, XF_SIGNALS };

static const char *xf_step(int step)
{
	switch (step) {
	case XF_SETSID: return "setsid";
	case XF_STDIO: return "stdio";
	case XF_CLOSE: return "close fds";
	case XF_CHDIR: return "chdir";
	case XF_SIGNALS: return "unblock signals";
	}
	return "exec";
}

/*
 * exec_child is the forked child of one exec: its own session and process
 * group, stdio from the passed fds (init's /dev/null otherwise), nothing
 * else open across execve, the request's cwd, signals unblocked (every
 * disposition is the default since child()), then execve. It shares
 * nothing with init but what fork copied.
 */
static _Noreturn void exec_child(const struct ar_parsed_req *r, const int slot[3], int errw)
{
	struct exec_fail f = {0, 0};
	uint64_t none = 0;
	if (syscall(SYS_setsid) < 0) {
		f.step = XF_SETSID;
		goto fail;
	}
	/* The received fds are all above 2 (init's 0-2 are open), so no
	 * dup3 clobbers one still needed. */
	for (int k = 0; k < 3; k++) {
		if (slot[k] >= 0 && syscall(SYS_dup3, slot[k], k, 0) < 0) {
			f.step = XF_STDIO;
			goto fail;
		}
	}
	/* A terminal's slave is the session's controlling terminal. */
	if ((r->flags & AR_EXEC_TTY) && syscall(SYS_ioctl, 0, TIOCSCTTY, 0) < 0) {
		f.step = XF_STDIO;
		goto fail;
	}
	/* The sync socket, the signalfd, the template's lock and every fd
	 * received for this or another request go at execve. */
	if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
		f.step = XF_CLOSE;
		goto fail;
	}
	if (r->cwd[0] && syscall(SYS_chdir, r->cwd) < 0) {
		f.step = XF_CHDIR;
		goto fail;
	}
	if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, sizeof none) < 0) {
		f.step = XF_SIGNALS;
		goto fail;
	}
	char buf[PATH_MAX];
	const char *name = r->argv[0], *path;
	int code = look_path(name, r->path, buf, &path);
	if (code) {
		say((const char *[]){"agentrun: ", name, code == 126 ? ": permission denied\n" : ": command not found\n", NULL});
		exit_now(code);
	}
	(void)syscall(SYS_execve, path, r->argv, r->envp);
	int e = errno;
	const char *es = errstr(e);
	say((const char *[]){"agentrun: ", name, ": fork/exec ", path, ": ", es ? es : "exec failed", "\n", NULL});
	exit_now(e == ENOENT ? 127 : 126);
fail:
	f.err = errno;
	(void)syscall(SYS_write, errw, &f, sizeof f);
	exit_now(AR_EXIT_SETUP_FAILED);
}

/*
 * open_pty makes a pseudo-terminal on the sandbox's own devpts (its
 * /dev/ptmx; compile.go mounts a new instance), sized winsize (rows |
 * columns << 16; 0 leaves the kernel's), and opens its slave through
 * the master (TIOCGPTPEER), so no path is looked up for it.
 */
static int open_pty(uint32_t winsize, int *master, int *slave)
{
	/* The mode, unused without O_CREAT, is 0: the filter reads it. */
	int m = (int)syscall(SYS_openat, AT_FDCWD, "/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC, 0);
	if (m < 0)
		return -1;
	int unlock = 0;
	struct winsize ws = {.ws_row = (unsigned short)(winsize & 0xffff), .ws_col = (unsigned short)(winsize >> 16)};
	if (syscall(SYS_ioctl, m, TIOCSPTLCK, &unlock) < 0 || (winsize && syscall(SYS_ioctl, m, TIOCSWINSZ, &ws) < 0)) {
		int e = errno;
		(void)syscall(SYS_close, m);
		errno = e;
		return -1;
	}
	int sl = (int)syscall(SYS_ioctl, m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (sl < 0) {
		int e = errno;
		(void)syscall(SYS_close, m);
		errno = e;
		return -1;
	}
	*master = m;
	*slave = sl;
	return 0;
}

static void close_pty(int *master, int *slave)
{
	if (*master >= 0)
		(void)syscall(SYS_close, *master);
	if (*slave >= 0)
		(void)syscall(SYS_close, *slave);
	*master = *slave = -1;
}

/*
 * How an exec's child is cloned. On x86_64 it is a vfork: the child
 * borrows init's memory (on a stack of its own) until its execve, so that
 * nothing of init's address space is copied and torn down again for every
 * exec, which was a fifth of an exec's cost. Elsewhere it is a plain fork.
 */
#if defined(__x86_64__)
#define EXEC_CLONE_FLAGS (CLONE_VM | CLONE_VFORK | SIGCHLD)
#define EXEC_CLONE_KNOWN 0x19u /* flags, child_tid and tls; not the stack */

/* The child's stack: init is single-threaded and suspended while a child
 * runs on it, so one is enough. */
static char exec_stack[64 * 1024] __attribute__((aligned(16)));

struct exec_args {
	const struct ar_parsed_req *r;
	const int *slot;
	int errw;
};

static void exec_trampoline(void *arg)
{
	const struct exec_args *a = arg;
	exec_child(a->r, a->slot, a->errw);
}

/* clone_exec clones the exec's child with flags onto exec_stack, where it
 * runs exec_trampoline(a); *pidfd receives a pidfd with CLONE_PIDFD.
 * Returns the child's pid once it has exec'd or exited, or -1 with errno.
 * The child shares init's thread pointer, so its libc calls may set
 * init's errno; init reads errno only when the clone itself failed. */
static long clone_exec(unsigned long flags, struct exec_args *a, int *pidfd)
{
	register long r10 __asm__("r10") = 0; /* child_tid */
	register long r8 __asm__("r8") = 0;   /* tls */
	register long r12 __asm__("r12") = (long)exec_trampoline;
	register long r13 __asm__("r13") = (long)a;
	long ret;
	__asm__ volatile("syscall\n\t"
			 "test %%rax, %%rax\n\t"
			 "jnz 1f\n\t"
			 "xor %%ebp, %%ebp\n\t"
			 "mov %%r13, %%rdi\n\t"
			 "call *%%r12\n\t"
			 "mov %[exit], %%eax\n\t"
			 "mov $127, %%edi\n\t"
			 "syscall\n\t"
			 "ud2\n"
			 "1:"
			 : "=a"(ret)
			 : "a"((long)SYS_clone), "D"(flags), "S"(exec_stack + sizeof exec_stack), "d"(pidfd), "r"(r10),
			   "r"(r8), "r"(r12), "r"(r13), [exit] "i"(SYS_exit_group)
			 : "rcx", "r11", "memory");
	if (ret < 0) {
		errno = (int)-ret;
		return -1;
	}
	return ret;
}
#else
#define EXEC_CLONE_FLAGS SIGCHLD
#define EXEC_CLONE_KNOWN 0x1bu /* flags, stack, child_tid and tls */

struct exec_args {
	const struct ar_parsed_req *r;
	const int *slot;
	int errw;
};

/* clone_exec forks: a plain fork through the system call (no CLONE_VM,
 * so returning into this frame in the child is safe). */
static long clone_exec(unsigned long flags, struct exec_args *a, int *pidfd)
{
	long pid = syscall(SYS_clone, flags, 0UL, pidfd, NULL, 0UL);
	if (pid == 0)
		exec_child(a->r, a->slot, a->errw);
	return pid;
}
#endif

/* serve_exec clones the exec's child and replies exec-started or
 * exec-error; the received fds are closed either way. */
static void serve_exec(int sync, const struct ar_parsed_req *r, const int *fds, int nfds)
{
	int slot[3] = {-1, -1, -1}, k = 0;
	for (int i = 0; i < 3; i++)
		if (r->flags & (1u << i))
			slot[i] = fds[k++];
	if (serve_n >= AR_SERVE_MAX) {
		close_fds(fds, nfds);
		reply_error(sync, r->id, "exec", NULL, "too many processes", EAGAIN);
		return;
	}
	int master = -1, slave = -1;
	if (r->flags & AR_EXEC_TTY) {
		if (open_pty(r->winsize, &master, &slave) < 0) {
			int e = errno;
			reply_error(sync, r->id, "open a terminal", NULL, NULL, e);
			return;
		}
		slot[0] = slot[1] = slot[2] = slave;
	}
	int ep[2];
	if (syscall(SYS_pipe2, ep, O_CLOEXEC) < 0) {
		int e = errno;
		close_fds(fds, nfds);
		close_pty(&master, &slave);
		reply_error(sync, r->id, "exec", NULL, "pipe", e);
		return;
	}
	/* The pidfd lets the parent signal the child with no pid reuse
	 * race. */
	int pidfd = -1;
	struct exec_args a = {r, slot, ep[1]};
	long pid = clone_exec((unsigned long)(CLONE_PIDFD | EXEC_CLONE_FLAGS), &a, &pidfd);
	/* A kernel before 5.2 (EINVAL), or an outer filter. */
	if (pid < 0 && (errno == EINVAL || errno == EPERM || errno == ENOSYS)) {
		pidfd = -1;
		pid = clone_exec((unsigned long)EXEC_CLONE_FLAGS, &a, NULL);
	}
	int e = errno;
	close_fds(fds, nfds);
	(void)syscall(SYS_close, ep[1]);
	if (slave >= 0) {
		(void)syscall(SYS_close, slave);
		slave = -1;
	}
	if (pid < 0) {
		(void)syscall(SYS_close, ep[0]);
		close_pty(&master, &slave);
		reply_error(sync, r->id, "exec", NULL, "fork", e);
		return;
	}
	struct exec_fail f;
	long n;
	do
		n = syscall(SYS_read, ep[0], &f, sizeof f);
	while (n < 0 && errno == EINTR);
	(void)syscall(SYS_close, ep[0]);
	if (n == (long)sizeof f) {
		int st;
		while (syscall(SYS_wait4, (pid_t)pid, &st, 0, NULL) < 0 && errno == EINTR)
			;
		if (pidfd >= 0)
			(void)syscall(SYS_close, pidfd);
		close_pty(&master, &slave);
		reply_error(sync, r->id, xf_step(f.step), f.step == XF_CHDIR ? r->cwd : NULL, NULL, f.err);
		return;
	}
	serve_tab[serve_n].pid = (pid_t)pid;
	serve_tab[serve_n].id = r->id;
	serve_n++;
	struct out o;
	reply_head(&o, "exec-started", r->id);
	put(&o, ",\"pid\":");
	put_int(&o, pid);
	if (master >= 0)
		put(&o, ",\"tty\":1");
	put(&o, "}");
	send_reply2(sync, &o, master, pidfd);
	if (pidfd >= 0)
		(void)syscall(SYS_close, pidfd);
	close_pty(&master, &slave);
}

/* serve_signal signals an exec'd child, or its process group, while it is
 * unreaped: init is its reaper, so its pid (and pgid) cannot be reused
 * before then. Once reaped, ESRCH. */
static void serve_signal(int sync, const struct ar_parsed_req *r)
{
	int err = ESRCH;
	for (int i = 0; i < serve_n; i++) {
		if (serve_tab[i].id != r->target)
			continue;
		pid_t pid = serve_tab[i].pid;
		err = syscall(SYS_kill, (r->flags & AR_SIG_GROUP) ? -pid : pid, r->sig) < 0 ? errno : 0;
		break;
	}
	reply_ack(sync, r->id, err);
}

/* serve_reap reaps every child that ended: an exec'd one is reported,
 * an orphan (a background job of an exec) silently. */
static void serve_reap(int sync)
{
	for (;;) {
		int st;
		long pid = syscall(SYS_wait4, -1, &st, WNOHANG, NULL);
		if (pid < 0 && errno == EINTR)
			continue;
		if (pid <= 0)
			return;
		for (int i = 0; i < serve_n; i++) {
			if (serve_tab[i].pid != (pid_t)pid)
				continue;
			struct out o;
			reply_head(&o, "exec-exit", serve_tab[i].id);
			put(&o, ",\"code\":");
			put_int(&o, WIFSIGNALED(st) ? 0 : WEXITSTATUS(st));
			if (WIFSIGNALED(st)) {
				put(&o, ",\"signal\":");
				put_int(&o, WTERMSIG(st));
			}
			put(&o, "}");
			send_reply(sync, &o, -1);
			serve_tab[i] = serve_tab[--serve_n];
			break;
		}
	}
}

/* serve_request reads and handles one request; 0 when the parent hung
 * up. */
static int serve_request(int sync)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int) * REQ_FDS)];
	} ctl;
	struct iovec iov = {.iov_base = req_buf, .iov_len = sizeof req_buf};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof ctl.b};
	long n = syscall(SYS_recvmsg, sync, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	if (n == 0)
		return 0;
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 1 : 0;
	int fds[REQ_FDS], nfds = 0, extra = 0;
	for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); h; h = CMSG_NXTHDR(&mh, h)) {
		if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (int)((h->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof fd);
			if (nfds < REQ_FDS)
				fds[nfds++] = fd;
			else
				(void)syscall(SYS_close, fd), extra = 1;
		}
	}
	struct ar_parsed_req r;
	const char *why = "";
	int err = ar_parse_req(req_buf, (size_t)n, nfds, &r, req_slots, sizeof req_slots / sizeof req_slots[0], &why);
	if (!err && (mh.msg_flags & MSG_TRUNC))
		err = -E2BIG, why = "too long";
	if (!err && ((mh.msg_flags & MSG_CTRUNC) || extra))
		err = -EPROTO, why = "too many fds";
	if (err) {
		close_fds(fds, nfds);
		reply_error(sync, r.id, "request", NULL, why, -err);
		return 1;
	}
	switch (r.type) {
	case AR_REQ_EXEC:
		serve_exec(sync, &r, fds, nfds);
		break;
	case AR_REQ_SIGNAL:
		serve_signal(sync, &r);
		break;
	case AR_REQ_SIGNAL_ALL:
		/* Every process of the namespace but init itself. */
		reply_ack(sync, r.id, syscall(SYS_kill, -1, r.sig) < 0 ? errno : 0);
		break;
	}
	return 1;
}

/*
 * serve_loop is PID 1 of a session. sfd reads every catchable signal:
 * SIGCHLD means reaping; the others, which processes of the sandbox may
 * send to PID 1 (the kernel queues them, as they are blocked), are read
 * and dropped, so they neither end the session nor pile up.
 */
static _Noreturn void serve_loop(int sync, int sfd)
{
	for (;;) {
		struct pollfd pf[2] = {{.fd = sync, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
		if (syscall(SYS_ppoll, pf, 2, NULL, NULL, 0) < 0) {
			if (errno == EINTR)
				continue;
			exit_now(255);
		}
		if (pf[1].revents & POLLIN) {
			struct signalfd_siginfo si[8];
			long n = syscall(SYS_read, sfd, si, sizeof si);
			int reap = 0;
			for (long i = 0; n > 0 && i < n / (long)sizeof si[0]; i++)
				reap |= si[i].ssi_signo == SIGCHLD;
			if (reap)
				serve_reap(sync);
		}
		if (pf[0].revents & POLLIN) {
			if (!serve_request(sync))
				exit_now(0);
		} else if (pf[0].revents & (POLLHUP | POLLERR)) {
			/* The parent is gone: the kernel ends the namespace. */
			exit_now(0);
		}
	}
}

/* The system calls serve mode makes under the filter (serve_loop and its
 * helpers in init, exec_child up to execve), with what is known of their
 * arguments; the filter must allow each whatever the rest are. */
static const struct {
	const char *name;
	struct known_call c;
} serve_calls[] = {
	{"ppoll", {SYS_ppoll, 0, {0}}},
	{"recvmsg", {SYS_recvmsg, 1u | 1u << 2, {3, 0, MSG_CMSG_CLOEXEC | MSG_DONTWAIT}}},
	{"sendmsg", {SYS_sendmsg, 1u | 1u << 2, {3, 0, MSG_NOSIGNAL}}},
	{"read", {SYS_read, 0, {0}}},
	{"write", {SYS_write, 0, {0}}},
	{"close", {SYS_close, 0, {0}}},
	{"pipe2", {SYS_pipe2, 1u << 1, {0, O_CLOEXEC}}},
	{"clone", {SYS_clone, EXEC_CLONE_KNOWN, {EXEC_CLONE_FLAGS, 0, 0, 0, 0}}},
	{"wait4", {SYS_wait4, 0, {0}}},
	{"kill", {SYS_kill, 0, {0}}},
	{"setsid", {SYS_setsid, 0x3f, {0}}},
	{"dup3", {SYS_dup3, 1u << 2, {0, 0, 0}}},
	{"close_range", {SYS_close_range, 7u, {3, ~0U, CLOSE_RANGE_CLOEXEC}}},
	{"chdir", {SYS_chdir, 0, {0}}},
	{"rt_sigprocmask", {SYS_rt_sigprocmask, 1u | 1u << 3, {SIG_SETMASK, 0, 0, 8}}},
	{"newfstatat", {SYS_newfstatat, 1u | 1u << 3, {(uint64_t)(int64_t)AT_FDCWD, 0, 0, 0}}},
	{"faccessat", {SYS_faccessat, 1u | 1u << 2, {(uint64_t)(int64_t)AT_FDCWD, 0, X_OK}}},
	{"execve", {SYS_execve, 0, {0}}},
	{"exit_group", {SYS_exit_group, 0, {0}}},
};

/* The calls of an exec on a terminal, besides serve_calls. */
static const struct {
	const char *name;
	struct known_call c;
} tty_calls[] = {
	{"openat of /dev/ptmx", {SYS_openat, 1u | 1u << 2 | 1u << 3, {(uint64_t)(int64_t)AT_FDCWD, 0, O_RDWR | O_NOCTTY | O_CLOEXEC, 0}}},
	{"ioctl TIOCSPTLCK", {SYS_ioctl, 1u << 1, {0, TIOCSPTLCK}}},
	{"ioctl TIOCSWINSZ", {SYS_ioctl, 1u << 1, {0, TIOCSWINSZ}}},
	{"ioctl TIOCGPTPEER", {SYS_ioctl, 1u << 1 | 1u << 2, {0, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC}}},
	{"ioctl TIOCSCTTY", {SYS_ioctl, 7u, {0, TIOCSCTTY, 0}}},
};

const char *ar_serve_tty_denied(const void *filter, size_t n)
{
#ifdef NATIVE_AUDIT_ARCH
	for (size_t i = 0; i < sizeof tty_calls / sizeof tty_calls[0]; i++)
		if (!filter_allows(filter, n, NATIVE_AUDIT_ARCH, &tty_calls[i].c))
			return tty_calls[i].name;
#else
	(void)filter, (void)n;
#endif
	return NULL;
}

int ar_serve_denied(const void *filter, size_t n, int sync, int *pidfd)
{
	*pidfd = 0;
#ifdef NATIVE_AUDIT_ARCH
	for (size_t i = 0; i < sizeof serve_calls / sizeof serve_calls[0]; i++) {
		struct known_call c = serve_calls[i].c;
		if (c.nr == SYS_recvmsg || c.nr == SYS_sendmsg)
			c.args[0] = (uint64_t)sync;
		if (!filter_allows(filter, n, NATIVE_AUDIT_ARCH, &c))
			return (int)i;
	}
	const struct known_call pc = {SYS_clone, EXEC_CLONE_KNOWN, {CLONE_PIDFD | EXEC_CLONE_FLAGS, 0, 0, 0, 0}};
	*pidfd = filter_allows(filter, n, NATIVE_AUDIT_ARCH, &pc);
	return -1;
#else
	(void)filter, (void)n, (void)sync;
	return 0;
#endif
}

const char *ar_serve_call(int i)
{
	if (i < 0 || (size_t)i >= sizeof serve_calls / sizeof serve_calls[0])
		return "?";
	return serve_calls[i].name;
}

/* ---- forgetting the parent ---- */

/* Up to this many mappings are unmapped; a Go process has a few dozen. */
#define TRIM_MAX 1024

struct range {
	uintptr_t start, end;
};

/* parse_hex reads a hex number at *s and advances past it. */
static uintptr_t parse_hex(const char **s)
{
	uintptr_t v = 0;
	for (int d; (d = ar_hexval(**s)) >= 0; (*s)++)
		v = v << 4 | (uintptr_t)d;
	return v;
}

static int contains(const struct range *r, uintptr_t a)
{
	return a >= r->start && a < r->end;
}

/*
 * trim_plan reads /proc/self/maps (mapsfd, opened before pivot_root) and
 * lists the private anonymous mappings init does not use: the Go heap and
 * stacks and every other thread's memory, which the clone copied. Kept: the
 * mappings holding this thread's stack, its TLS and this file's statics,
 * file-backed mappings (code and data of the binary and its libraries), the
 * anonymous tail of each (.bss), shared ones, and the kernel's [vdso],
 * [vvar] and friends, [heap] and [stack].
 */
static int trim_plan(int mapsfd, struct range *out, int max, uintptr_t also_keep, const uintptr_t *only, int nonly)
{
	char buf[4096 + 512];
	size_t have = 0;
	int n = 0, eof = 0;
	uintptr_t prev_file_end = 0;
	char here;
	const uintptr_t keep[] = {(uintptr_t)&here, (uintptr_t)&errno, (uintptr_t)&start_nofile, also_keep};

	while (!eof || have) {
		if (!eof && have < sizeof buf - 1) {
			ssize_t r = read(mapsfd, buf + have, sizeof buf - 1 - have);
			if (r < 0)
				return -1;
			if (r == 0)
				eof = 1;
			have += (size_t)r;
		}
		char *nl = memchr(buf, '\n', have);
		if (!nl) {
			if (eof || have >= sizeof buf - 1)
				break; /* a truncated or overlong last line */
			continue;
		}
		*nl = 0;
		/* start-end perms offset dev inode [path] */
		const char *l = buf;
		struct range r;
		r.start = parse_hex(&l);
		if (*l++ != '-')
			return -1;
		r.end = parse_hex(&l);
		char perms[5] = {0};
		if (*l++ != ' ')
			return -1;
		for (int i = 0; i < 4 && *l && *l != ' '; i++)
			perms[i] = *l++;
		/* Skip offset and device, read the inode. */
		for (int field = 0; field < 2; field++) {
			while (*l == ' ')
				l++;
			while (*l && *l != ' ')
				l++;
		}
		while (*l == ' ')
			l++;
		unsigned long inode = 0;
		for (; *l >= '0' && *l <= '9'; l++)
			inode = inode * 10 + (unsigned long)(*l - '0');
		while (*l == ' ')
			l++;
		const char *path = l;

		int anon = inode == 0 && (*path == 0 || strncmp(path, "[anon:", 6) == 0);
		int drop = anon && perms[3] == 'p' && r.start != prev_file_end;
		for (size_t i = 0; drop && i < sizeof keep / sizeof keep[0]; i++)
			if (keep[i] && contains(&r, keep[i]))
				drop = 0;
		if (drop && only) {
			int hit = 0;
			for (int i = 0; i < nonly && !hit; i++)
				hit = contains(&r, only[i]);
			drop = hit;
		}
		if (inode != 0)
			prev_file_end = r.end;
		else if (!drop && anon && r.start == prev_file_end)
			prev_file_end = 0; /* only the first tail is .bss */
		if (drop && n < max)
			out[n++] = r;

		size_t used = (size_t)(nl + 1 - buf);
		memmove(buf, nl + 1, have - used);
		have -= used;
	}
	return n;
}

/*
 * forget_parent runs in init once the command has started, off the spawn's
 * critical path. Init is a copy of the whole Go parent: unmapping that copy
 * keeps a long-lived sandbox from pinning a snapshot of the parent's memory
 * (which would otherwise be duplicated page by page as the parent writes
 * to it) and leaves nothing of the parent to read even for something that
 * got past init's non-dumpable protection. It is hardening: a failure
 * leaves init as it was.
 */
static void forget_parent(struct ctx *c, int mapsfd)
{
	struct range drop[TRIM_MAX];
	int n = mapsfd >= 0 ? trim_plan(mapsfd, drop, TRIM_MAX, 0, NULL, 0) : 0;
	if (mapsfd >= 0)
		close(mapsfd);
	/* The plan's memory goes too: nothing may touch it from here on. */
	c->p = NULL;
	for (int i = 0; i < n; i++)
		(void)munmap((void *)drop[i].start, drop[i].end - drop[i].start);
}

/*
 * shed_parent runs first in the child. The clone copied the Go parent's
 * whole address space copy-on-write, and the parent goes on allocating
 * and scheduling on several threads while the child sets up: every page of
 * its heap it writes would be copied, each copy with a TLB-shootdown IPI to
 * the other CPUs. Dropping the child's copy of the Go heap at once lets the
 * parent reuse those pages in place. Only the mappings that hold the
 * addresses the parent named (its heap and goroutine stacks) go: the rest,
 * the dynamic loader's data in a dynamically linked parent among them, is
 * still needed here. The plan lives in a mapping of its own and is kept.
 * Failure only costs speed.
 */
static void shed_parent(const struct ar_plan *p)
{
	struct range drop[TRIM_MAX];
	if (p->nheap <= 0)
		return;
	int mapsfd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (mapsfd < 0)
		return;
	int n = trim_plan(mapsfd, drop, TRIM_MAX, (uintptr_t)p, p->heap, p->nheap);
	close(mapsfd);
	for (int i = 0; i < n; i++)
		(void)munmap((void *)drop[i].start, drop[i].end - drop[i].start);
}

/* ---- the init child ---- */

static int parent_gone(const struct ctx *c)
{
	if (c->p->expect_ppid >= 0 && getppid() != c->p->expect_ppid)
		return 1;
	/* In a new PID namespace getppid() is 0 whoever the parent is; a dead
	 * parent shows as a hung-up sync socket instead. */
	struct pollfd pf = {.fd = c->sync, .events = 0};
	return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLHUP | POLLERR));
}

/* set_rlimit is setrlimit(2) through prlimit64 itself: musl's wrapper
 * falls back to signalling every thread it knows of, which in this copy of
 * a multi-threaded parent are not there. */
static int set_rlimit(int resource, const struct rlimit *rl)
{
	return (int)syscall(SYS_prlimit64, 0, resource, rl, NULL);
}

static _Noreturn void child(const struct ar_plan *p, int heap_left_behind)
{
	struct ctx c = {.p = p, .sync = p->fds[p->sync_fd]};
	char go;

	/* Join the v1 cgroups first, while this is one thread and runs only
	 * code of ours: "0" moves the calling thread, which the kernel does
	 * without the global thread-group lock (and its RCU grace period)
	 * that writing a pid to cgroup.procs takes. */
	for (int i = 0; i < p->ntask_fds; i++)
		if (write(p->task_fds[i], "0", 1) != 1)
			die(&c, "cgroup placement");
	if (!heap_left_behind)
		shed_parent(p);

	/* Go's handlers must never run here, and the command starts with every
	 * signal at its default: ignored ones are reset too, whatever the
	 * caller ignored (a prestarted init still has the caller's
	 * dispositions, which Go's runtime would have replaced), and init must
	 * see its command exit, which an ignored SIGCHLD would reap unseen.
	 * All signals stay blocked; the command unblocks them, init reads a
	 * signalfd. */
	for (int sig = 1; sig <= 64; sig++) {
		/* The kernel's struct, through the system call: libc wrappers
		 * refuse the signals they reserve (32 and 33 in glibc, 32 to 34
		 * in musl), whose dispositions must be reset all the same. */
		struct {
			uintptr_t handler;
			unsigned long flags;
			uintptr_t restorer;
			uint64_t mask;
		} old, dfl = {0};
		if (sig == SIGKILL || sig == SIGSTOP)
			continue;
		if (syscall(SYS_rt_sigaction, sig, NULL, &old, sizeof old.mask) < 0 ||
		    (old.handler != (uintptr_t)SIG_DFL && syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof dfl.mask) < 0))
			die(&c, "reset signal dispositions");
	}
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		die(&c, "parent death signal");
	if (arrange_fds(p) < 0)
		die(&c, "close inherited fds");
	c.sync = p->sync_fd;
	hide_cmdline();

	drop_bounding(&c);

	/* Wait until the parent has written the id maps. EOF: it gave up. */
	ssize_t n;
	do
		n = recv(c.sync, &go, 1, 0);
	while (n < 0 && errno == EINTR);
	if (n != 1)
		_exit(AR_EXIT_SETUP_FAILED);

	/* Host supplementary groups (root mode) go before anything else. */
	if (p->drop_groups && syscall(SYS_setgroups, 0, NULL) < 0)
		die(&c, "setgroups");
	/* Keep-caps so that a plan mapping uid 0 does not lose the
	 * capabilities the setup needs when switching to the sandbox uid. */
	if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0)
		die(&c, "keep capabilities");
	if (syscall(SYS_setresgid, p->gid, p->gid, p->gid) < 0)
		die(&c, "setresgid");
	if (syscall(SYS_setresuid, p->uid, p->uid, p->uid) < 0)
		die(&c, "setresuid");
	if (raise_effective() < 0)
		die(&c, "restore capabilities");
	/* A credential change cleared the parent death signal: set it again,
	 * then make sure the parent did not die before it was set. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		die(&c, "parent death signal");
	if (parent_gone(&c))
		_exit(AR_EXIT_SETUP_FAILED);
	/* Non-dumpable: nothing in the sandbox may ptrace PID 1 or open its
	 * /proc entries, /proc/1/exe (the agentrun binary) included. Set after
	 * the credential change, which resets it. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		die(&c, "set non-dumpable");
	/* A new session: TIOCSTI/TIOCLINUX cannot reach the caller's tty. */
	if (setsid() < 0)
		die(&c, "setsid");
	if (p->hostname && sethostname(p->hostname, strlen(p->hostname)) < 0)
		die(&c, "sethostname");
	/* Opened on the host's /proc, which is certain to exist, and read once
	 * the command runs (forget_parent). */
	int mapsfd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	/* Started with init's credentials, which it copies. */
	static struct release rel; /* see big_locals */
	start_loader(&c, &rel);
	setup_root(&c);
	if (!loader.split_net && (p->clone_flags & CLONE_NEWNET) && p->loopback) {
		int nl = route_socket(), r = nl < 0 ? nl : loopback_up(nl);
		if (nl >= 0)
			close(nl);
		if (r < 0)
			die_parts(&c, (const char *[]){"loopback up", NULL}, (const char *[]){NULL}, -r);
	}
	/* Undo Go's raise of the soft open-files limit, exactly when Go's own
	 * exec would: the limit is still what the runtime set. The plan's
	 * limits below take precedence. */
	struct rlimit cur;
	if (start_nofile_ok && start_nofile.rlim_max > 0 && start_nofile.rlim_cur < start_nofile.rlim_max - 1 &&
	    getrlimit(RLIMIT_NOFILE, &cur) == 0 && cur.rlim_cur == start_nofile.rlim_max - 1 &&
	    cur.rlim_max == start_nofile.rlim_max && set_rlimit(RLIMIT_NOFILE, &start_nofile) < 0)
		die(&c, "rlimits");
	for (int i = 0; i < p->nrlimits; i++) {
		const struct ar_rlimit *r = &p->rlimits[i];
		struct rlimit rl = {.rlim_cur = r->soft, .rlim_max = r->hard};
		if (set_rlimit(r->resource, &rl) < 0) {
			int e = errno;
			die_parts(&c, (const char *[]){"rlimits", NULL}, (const char *[]){r->name, NULL}, e);
		}
	}

	/* A fresh anonymous session keyring: the one inherited from the
	 * caller would give the command the caller's keys. */
	if (syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL, 0, 0, 0) < 0)
		die(&c, "session keyring");

	int sfd;
	if (p->serve) {
		/* Every signal, glibc's reserved ones included (serve_loop). */
		uint64_t all = ~0ULL;
		sfd = (int)syscall(SYS_signalfd4, -1, &all, sizeof all, SFD_CLOEXEC);
	} else {
		sigset_t fwd;
		sigemptyset(&fwd);
		sigaddset(&fwd, SIGCHLD);
		for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
			sigaddset(&fwd, forwarded[i]);
		sfd = signalfd(-1, &fwd, SFD_CLOEXEC);
	}
	if (sfd < 0)
		die(&c, "signalfd");

	/* Everything so far ran while the parent checked the plan, made the
	 * cgroup and compiled the filter, the net thread made the network
	 * namespace and the loader loaded the filter; nothing of the command
	 * runs before all of it. The old root goes first: it need not wait
	 * for the parent. */
	await_net();
	/* Detaching the old root waits for an expedited RCU grace period,
	 * which a CPU busy in the kernel (the net thread making the network
	 * namespace) holds up; by now that thread is gone. */
	finish_root(&c);
	await_loader(LOADER_LOADED);
	if (chdir(p->cwd) < 0) {
		int e = errno;
		die_parts(&c, (const char *[]){"chdir ", p->cwd, NULL}, (const char *[]){NULL}, e);
	}
	if (loader.split_net) {
		if (syscall(SYS_setns, loader.netfd, CLONE_NEWNET) < 0)
			die_parts(&c, (const char *[]){"network namespace", NULL}, (const char *[]){"join", NULL}, errno);
		close(loader.netfd);
		loader.netfd = -1;
	}
	join_release_cgroups(&c, &rel, 1);
	/* In the sandbox's cgroup now, so the new cgroup namespace is rooted
	 * there. */
	if (p->unshare_cgroupns && syscall(SYS_unshare, CLONE_NEWCGROUP) < 0)
		die(&c, "cgroup namespace");
	drop_privileges(&c);
	/* The command runs as a uid that is not root in the namespace, so
	 * execve would clear the permitted and effective sets anyway; setting
	 * them to just the granted capabilities here makes the lookup and the
	 * filter load run with no more than the command will hold. What
	 * --cap-add granted is also made inheritable and raised as ambient,
	 * which is how it crosses the command's execve. */
	if (keep_only_granted(c.p) < 0)
		die_parts(&c, (const char *[]){"drop privileges", NULL}, (const char *[]){"set capability sets", NULL}, errno);

	if (p->serve) {
		/* Last: from here on init, and every child it forks, run under
		 * the filter. */
		finish_loader(&c, &rel);
		struct out o = {.n = 0};
		put(&o, "{\"type\":\"started\",\"pid\":0}");
		send_msg(c.sync, &o);
		forget_parent(&c, mapsfd);
		serve_loop(c.sync, sfd);
	}

	char buf[PATH_MAX];
	const char *name = p->argv[0], *path;
	int code = look_path(name, p->path, buf, &path);
	if (code) {
		/* Not found or not executable: a normal exit with the shell's
		 * status. */
		say((const char *[]){"agentrun: ", name, code == 126 ? ": permission denied\n" : ": command not found\n", NULL});
		report_exit(c.sync, code, 0);
		_exit(code);
	}
	/* Last: from here on init, and the command it starts, run under the
	 * filter. */
	finish_loader(&c, &rel);

	/* The command child's stack: init is suspended while the child uses it
	 * (CLONE_VFORK), so a buffer of init's is safe. glibc's clone(3)
	 * switches stacks correctly; no fork(3), whose atfork handlers take
	 * locks. */
	enum { cmd_stack_size = 64 * 1024 };
	static _Alignas(64) char cmd_stack[cmd_stack_size]; /* see big_locals */
	volatile struct exec_msg m = {0};
	struct command_arg arg = {.c = &c, .path = path, .m = &m};
	pid_t cmd = clone(run_command, cmd_stack + cmd_stack_size, CLONE_VM | CLONE_VFORK | SIGCHLD, &arg);
	if (cmd < 0)
		die(&c, "fork command");
	if (m.kind == EXEC_EXITED) {
		/* execve failed: 127 or 126, the shell's statuses. */
		report_exit(c.sync, m.code, 0);
		_exit(m.code);
	}
	if (m.kind == EXEC_REPORTED)
		_exit(AR_EXIT_SETUP_FAILED); /* the child reported the error */

	struct out o = {.n = 0};
	put(&o, "{\"type\":\"started\",\"pid\":");
	put_int(&o, cmd);
	put(&o, "}");
	send_msg(c.sync, &o);
	forget_parent(&c, mapsfd);
	init_loop(c.sync, sfd, cmd);
}

/* ---- entry points, run in the Go parent ---- */

/* Go's heap arenas are this size and aligned to it on 64-bit Linux. */
#define GO_ARENA (64UL << 20)

/*
 * mark_heap applies advice to the Go heap arenas holding the plan's heap
 * addresses. With MADV_DONTFORK around the clone, the child never gets a
 * copy of the Go heap: no page tables to copy for it (the clone's cost
 * would otherwise grow with the caller's heap) and no copy-on-write faults
 * in the parent afterwards. The arenas hold only Go memory, so nothing the
 * child needs is left out. Returns 1 when every arena was marked whole;
 * otherwise the child drops what it got (shed_parent). A concurrent clone
 * of another C init that overlaps this window also leaves the heap behind,
 * which is harmless for a child that runs C code only; a fork by os/exec is
 * not (its child runs Go code on the heap until it execs), and the caller
 * (cinit.Start) keeps those out of the window with syscall.ForkLock. A
 * plain fork(2) made by C code elsewhere in the process is not excluded.
 */
static int mark_heap(const struct ar_plan *p, int advice)
{
#if UINTPTR_MAX <= 0xffffffffu
	/* 32-bit Go uses 4 MiB arenas that need not be aligned like this:
	 * leave the heap to shed_parent. */
	(void)p;
	(void)advice;
	return 0;
#endif
	int whole = p->nheap > 0;
	for (int i = 0; i < p->nheap && i < 4; i++) {
		uintptr_t base = p->heap[i] & ~(GO_ARENA - 1);
		if (madvise((void *)base, GO_ARENA, advice) < 0)
			whole = 0;
	}
	return whole;
}

/* clone_child clones like fork(2) into the given namespaces: no CLONE_VM,
 * so the child runs on its own copy of this stack, and exit_signal SIGCHLD
 * so the Go side can wait for it like any child. clone3 is needed for
 * CLONE_INTO_CGROUP; clone(2) is the fallback where clone3 is filtered. */
static long clone_child(uint64_t flags, int cgroup_fd)
{
	/* A CLONE_PARENT child (the init prestart's starter clones as its
	 * sibling) gets the starter's own exit signal, which is SIGCHLD (the
	 * starter is a clone with exit signal SIGCHLD); clone3 refuses to be told.
	 * Another signal there would hide the init from a waitid without
	 * __WALL. */
	struct clone_args ca = {.flags = flags, .exit_signal = flags & CLONE_PARENT ? 0 : SIGCHLD};
	if (cgroup_fd >= 0) {
		ca.flags |= CLONE_INTO_CGROUP;
		ca.cgroup = (uint64_t)cgroup_fd;
	}
	long pid = syscall(SYS_clone3, &ca, sizeof ca);
	if (pid < 0 && errno == ENOSYS && cgroup_fd < 0)
		pid = syscall(SYS_clone, (unsigned long)flags | SIGCHLD, 0, NULL, NULL, 0);
	return pid;
}

int ar_start(const struct ar_plan *p)
{
	uint64_t all = ~0ULL, old;
	if (p->nfds < 4 || p->nfds > AR_MAX_ENTRIES || p->nmounts > AR_MAX_ENTRIES ||
	    p->ndevices > AR_MAX_ENTRIES || p->sync_fd < 3 || p->sync_fd >= p->nfds || (!p->serve && (!p->argv || !p->argv[0])))
		return -EINVAL;
	/* The child starts with every signal blocked, so no signal can reach a
	 * Go handler in it before child() has reset them. */
	if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, &old, sizeof all) < 0)
		return -errno;
	int marked = mark_heap(p, MADV_DONTFORK);
	/* The loader makes the network namespace (split_net). */
	long pid = clone_child(split_net(p) ? p->clone_flags & ~(uint64_t)CLONE_NEWNET : p->clone_flags, p->cgroup_fd);
	if (pid == 0)
		child(p, marked);
	int e0 = errno;
	(void)mark_heap(p, MADV_DOFORK);
	errno = e0;
	int e = errno;
	(void)syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, sizeof old);
	return pid < 0 ? -e : (int)pid;
}

/* holder_main is the userns holder: it shares the caller's memory
 * (CLONE_VM), so it touches nothing but its own stack and makes only
 * system calls that cannot fail in a way it would act on. */
static int holder_main(void *arg)
{
	int pipe_rd = (int)(intptr_t)arg;
	char b;
	/* Signals stay blocked: only SIGKILL ends it, or EOF on the pipe when
	 * the parent is gone. It must not hold the caller's files. */
	(void)syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	if (pipe_rd > 0)
		(void)syscall(SYS_close_range, 0U, (unsigned)pipe_rd - 1, 0);
	(void)syscall(SYS_close_range, (unsigned)pipe_rd + 1, ~0U, 0);
	while (syscall(SYS_read, pipe_rd, &b, 1) < 0)
		;
	syscall(SYS_exit, 0);
	return 0;
}

int ar_userns_holder(int pipe_rd, void *stack, size_t stack_size)
{
	uint64_t all = ~0ULL, old;
	if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, &old, sizeof all) < 0)
		return -errno;
	/* CLONE_VM: the holder only blocks, so sharing this address space
	 * spares the copy of the page tables and the copy-on-write faults a
	 * fork-style clone of a large Go process costs. */
	int pid = clone(holder_main, (char *)stack + stack_size, CLONE_VM | CLONE_NEWUSER | SIGCHLD,
			(void *)(intptr_t)pipe_rd);
	int e = errno;
	(void)syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, sizeof old);
	return pid < 0 ? -e : pid;
}
