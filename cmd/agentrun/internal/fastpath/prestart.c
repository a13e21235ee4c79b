//go:build linux && cgo

/*
 * prestart.c: start the sandbox init from a cached plan image before the Go
 * runtime starts (fastpath.h; the image and the init: cinit.h).
 *
 * This runs in the CLI's constructor, single-threaded, before Go exists, and
 * must never make the CLI fail: every problem ends in "no prestart" and the
 * Go side does the spawn the ordinary way. The image is only a guess at the
 * plan. The init started from it builds its root in its own namespaces and
 * then blocks before its release; the Go side compiles the real plan and
 * adopts the init only when the image is byte for byte what it would have
 * written itself, and kills it otherwise.
 */
#define _GNU_SOURCE
#include "fastpath.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <linux/mount.h>
#include <linux/openat2.h>
#include <linux/sched.h>

/* Written once by the constructor, before any other thread exists; handed
 * out once by ar_prestart_take. */
static struct ar_prestart result;
/* The image's mapping, unmapped by ar_prestart_take when the starter
 * failed (the Go side copies it otherwise). */
static void *image_map;
static size_t image_map_len;
/* The command as the caller's argv has it; result.argv moves to the
 * init's copy, inside image_map, once an init is being started. */
static char *const *cmd_argv;
/* The inode of the init's end of the sync socket: how an init the starter
 * died before naming is told from any other child (lost_init). */
static unsigned long long init_sock_ino;

#define KEY_MAX 8192
static char key_buf[KEY_MAX];
static char path_buf[PATH_MAX];

/* ---- starting ---- */

int ar_write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int ar_write_text(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int r = ar_write_all(fd, s, strlen(s));
	return close(fd) < 0 || r < 0 ? -1 : 0;
}

static int proc_path(char *buf, size_t n, int pid, const char *name)
{
	int r = snprintf(buf, n, "/proc/%d/%s", pid, name);
	return r > 0 && (size_t)r < n ? 0 : -1;
}

/* kill_reap kills a child of this process and waits for it. */
static void kill_reap(pid_t pid)
{
	kill(pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}

/*
 * An idmapped bind needs a user namespace with its maps, and only a
 * process can own one while the maps are written: a holder (nsinit's
 * cUserns). start_core starts the holders before it clones the init and
 * uses them after, while the init waits for its go: their start overlaps
 * the init's clone. The forked starter reaps them once the init has its
 * go. Where start_core runs in this process itself (the express path),
 * it leaves them in left_holders, neither killed nor reaped: a holder ends
 * by itself once its pipe is closed (or with this process: parent death
 * signal), and the express path reaps it after the release, when the
 * spawn waits anyway (ar_prestart_reap_holders).
 */
struct holder {
	int pid, wr; /* the holder and the write end of its pipe, or -1 */
	void *stack;
};

enum { holder_stack_size = 64 * 1024, max_holders = 16 };

/* The holders start_core left to the express path. */
static struct holder left_holders[max_holders];
static int nleft_holders;

static int holder_start(struct holder *hd)
{
	int pipefd[2];
	*hd = (struct holder){.pid = -1, .wr = -1};
	void *stack = mmap(NULL, holder_stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED)
		return -1;
	hd->stack = stack;
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return -1;
	hd->wr = pipefd[1];
	hd->pid = ar_userns_holder(pipefd[0], stack, holder_stack_size);
	close(pipefd[0]);
	return hd->pid > 0 ? 0 : -1;
}

/* holder_userns writes the maps of a started holder and returns an fd of
 * its user namespace. The forked starter's holder is killed here, and
 * holder_reap waits for it later; one of this process's own ends when
 * holder_leave closes its pipe. */
static int holder_userns(struct holder *hd, const char *uid_map, const char *gid_map, int own)
{
	char path[64];
	int fd = -1;
	if (proc_path(path, sizeof path, hd->pid, "uid_map") == 0 && ar_write_text(path, uid_map) == 0 &&
	    proc_path(path, sizeof path, hd->pid, "gid_map") == 0 && ar_write_text(path, gid_map) == 0 &&
	    proc_path(path, sizeof path, hd->pid, "ns/user") == 0)
		fd = open(path, O_RDONLY | O_CLOEXEC);
	if (!own)
		kill(hd->pid, SIGKILL);
	return fd;
}

/* holder_reap kills and reaps a holder and frees what it used; its stack
 * only once it is gone. */
static void holder_reap(struct holder *hd)
{
	if (hd->pid > 0)
		kill_reap(hd->pid);
	if (hd->wr >= 0)
		close(hd->wr);
	if (hd->stack)
		munmap(hd->stack, holder_stack_size);
	*hd = (struct holder){.pid = -1, .wr = -1};
}

/* holder_leave leaves a holder of this process's own to the express path:
 * its pipe closed, which ends it, and its pid and stack kept for
 * holder_reap. */
static void holder_leave(struct holder *hd)
{
	if (hd->wr >= 0)
		close(hd->wr);
	if ((hd->pid > 0 || hd->stack) && nleft_holders < max_holders)
		left_holders[nleft_holders++] = (struct holder){.pid = hd->pid, .wr = -1, .stack = hd->stack};
	*hd = (struct holder){.pid = -1, .wr = -1};
}

void ar_prestart_reap_holders(void)
{
	for (int i = 0; i < nleft_holders; i++)
		holder_reap(&left_holders[i]);
	nleft_holders = 0;
}

/* prep_open is the first half of mounts.CloneBind with an idmap: a
 * detached clone of the source, which must not contain a symlink
 * anywhere. prep_idmap, the second, gives it the attributes and the idmap
 * (only a tree nobody attached yet takes one: the init waits for its go). */
static int prep_open(const struct ar_prep *pr)
{
	struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_NO_SYMLINKS};
	int src = (int)syscall(SYS_openat2, AT_FDCWD, pr->source, &how, sizeof how);
	if (src < 0)
		return -1;
	unsigned rec = pr->recursive ? AT_RECURSIVE : 0;
	int tree = (int)syscall(SYS_open_tree, src, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | rec);
	close(src);
	return tree;
}

static int prep_idmap(const struct ar_prep *pr, int tree, struct holder *hd, int own)
{
	int ns = holder_userns(hd, pr->uid_map, pr->gid_map, own);
	if (ns < 0)
		return -1;
	struct mount_attr attr = {.attr_set = pr->attr, .userns_fd = (uint64_t)ns};
	long r = syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | (pr->recursive ? AT_RECURSIVE : 0), &attr, sizeof attr);
	close(ns);
	return r < 0 ? -1 : 0;
}

/* template_lock opens the root template's lock file and takes its shared
 * lock, as mounts.OpenTemplateLock does: no symlink in the path, without
 * waiting (only a sweep removing the template holds it exclusively), then
 * checks that it was not removed meanwhile and is the caller's own. The
 * init inherits the fd, and with it the lock. */
static int template_lock(const char *path)
{
	struct open_how how = {.flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, .resolve = RESOLVE_NO_SYMLINKS};
	int fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
	if (fd < 0)
		return -1;
	struct stat st;
	if (flock(fd, LOCK_SH | LOCK_NB) < 0 || fstat(fd, &st) < 0 || st.st_nlink == 0 || !S_ISREG(st.st_mode) ||
	    st.st_uid != geteuid() || (st.st_mode & 022)) {
		close(fd);
		return -1;
	}
	/* The last use, which sweeps read (mounts.AcquireTemplate): at most
	 * one write a minute. Spawns that never reach Go would otherwise
	 * leave a template in use to look idle. */
	struct timespec now;
	if (clock_gettime(CLOCK_REALTIME, &now) == 0 && now.tv_sec - st.st_mtim.tv_sec > 60)
		(void)futimens(fd, NULL);
	return fd;
}

/* cache_dir is the directory of the images: a private one of this user's
 * state directory (internal/statedir). */
static int cache_dir(char *buf, size_t n, uid_t euid)
{
	int r;
	if (euid == 0) {
		r = snprintf(buf, n, "/run/agentrun/prestart");
	} else {
		const char *x = getenv("XDG_RUNTIME_DIR");
		struct stat st;
		if (!x || x[0] != '/' || lstat(x, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != euid || (st.st_mode & 077))
			return -1;
		r = snprintf(buf, n, "%s/agentrun/prestart", x);
	}
	return r > 0 && (size_t)r < n ? 0 : -1;
}

static int key_add(size_t *at, const char *s)
{
	size_t n = strlen(s) + 1;
	if (n > KEY_MAX - *at)
		return -1;
	memcpy(key_buf + *at, s, n);
	*at += n;
	return 0;
}

/* key_add_file adds a digest of a policy file's content. Only a regular
 * file of at most 1 MiB is read: opening a FIFO, a pipe (/dev/stdin) or a
 * device here would take from the Go side what it reads next. Anything
 * else keys on its path alone; the plan's check and the init's wait for
 * it before touching host directories (await_verify) keep that safe. */
/* policy_unhashed: the key has a policy file's path but not its content
 * (key_add_file). Go compiles the plan anew on every spawn, so a hit stays
 * safe; the express path, which trusts the key for the policy, stands
 * aside. */
static int policy_unhashed;

static int key_add_unhashed(size_t *at)
{
	policy_unhashed = 1;
	return key_add(at, "policy:not-hashed");
}

static int key_add_file(size_t *at, const char *path)
{
	char line[64];
	struct stat st, fst;
	if (stat(path, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > (1 << 20))
		return key_add_unhashed(at);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return key_add_unhashed(at);
	uint64_t h = AR_FNV_OFFSET, n = 0;
	int ok = fstat(fd, &fst) == 0 && S_ISREG(fst.st_mode) && fst.st_dev == st.st_dev && fst.st_ino == st.st_ino;
	unsigned char buf[4096];
	while (ok) {
		ssize_t r = read(fd, buf, sizeof buf);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 || (n += (uint64_t)r) > (1 << 20))
			ok = 0;
		if (r <= 0)
			break;
		h = ar_fnv1a(buf, (uint64_t)r, h);
	}
	close(fd);
	if (!ok)
		return key_add_unhashed(at);
	snprintf(line, sizeof line, "policy:%llu:%016llx", (unsigned long long)n, (unsigned long long)h);
	return key_add(at, line);
}

/* The caller variables that reach the command (internal/passenv; a test
 * keeps the two lists equal). Their values are part of the key: another
 * TERM is another plan, and as a key of its own it costs no early init
 * that is then thrown away. */
static const char *const pass_env[] = {"PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TERM", "COLORTERM", "NO_COLOR", "TZ", NULL};

const char *const *ar_prestart_pass_env(void)
{
	return pass_env;
}

static int key_add_env(size_t *at)
{
	char kv[4096];
	for (const char *const *k = pass_env; *k; k++) {
		/* "K=V", or "K" alone when unset (not the same as empty). */
		const char *v = getenv(*k);
		int n = v ? snprintf(kv, sizeof kv, "%s=%s", *k, v) : snprintf(kv, sizeof kv, "%s", *k);
		if (n < 0 || (size_t)n >= sizeof kv || key_add(at, kv) < 0)
			return -1;
	}
	return 0;
}

/* ar_open_cached opens the cache file if this user alone can have written it. */
int ar_open_cached(const char *dir, const char *name, uid_t euid, struct stat *st)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return -1;
	int fd = -1;
	if (fstat(dfd, st) == 0 && st->st_uid == euid && !(st->st_mode & 077))
		fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	close(dfd);
	if (fd < 0)
		return -1;
	if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode) || st->st_uid != euid || (st->st_mode & 022) ||
	    st->st_size < (off_t)sizeof(struct ar_image) || st->st_size > AR_IMAGE_MAX) {
		close(fd);
		return -1;
	}
	return fd;
}

int ar_read_all(int fd, void *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, (char *)buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

static int start_core(const struct ar_image *h, struct ar_plan *p, int sv[2], int out, int own, pid_t *pidp);
static _Noreturn void start_init(const struct ar_image *h, struct ar_plan *p, int sv[2], int out, pid_t parent);

/* started records in result what an init that was started needs: the
 * image (mem, total bytes mapped, len of them read) and the command's
 * copy (av) in it. */
static void started(unsigned char *mem, size_t total, size_t len, char **av, int unhashed)
{
	image_map = mem;
	image_map_len = total;
	cmd_argv = result.argv;
	result.image = mem;
	result.image_len = len;
	result.argv = av;
	result.no_express = unhashed;
	result.starter = result.starter_fd = -1;
}

void ar_prestart(int argc, char **argv, char **envp)
{
	(void)envp;
	if (sizeof(void *) != 8)
		return;
	if (argc < 4 || !argv[1] || strcmp(argv[1], "spawn") != 0)
		return;
	const char *v = getenv("AGENTRUN_PRESTART");
	if (v && (strcmp(v, "0") == 0 || strcmp(v, "off") == 0))
		return;
	/* Go opens /dev/null on a closed fd 0, 1 or 2 when it starts; before
	 * that, a socket or tree made here could take the number and reach the
	 * command as its stdio. Without all three, leave the spawn to Go. */
	for (int fd = 0; fd <= 2; fd++)
		if (fcntl(fd, F_GETFD) < 0)
			return;
	int dd = -1;
	for (int i = 2; i < argc; i++)
		if (strcmp(argv[i], "--") == 0) {
			dd = i;
			break;
		}
	if (dd < 0 || dd + 1 >= argc)
		return;

	/* The key: what the plan depends on that changes between callers
	 * (ids, directory, flags, the policy file, the variables that pass
	 * into the sandbox). Everything else (host files, the rest of the
	 * environment) shows up as a different plan on the Go side. */
	uid_t euid = geteuid();
	char ids[64], cwd[PATH_MAX];
	size_t klen = 0;
	snprintf(ids, sizeof ids, "uid=%u gid=%u", (unsigned)euid, (unsigned)getegid());
	if (!getcwd(cwd, sizeof cwd) || key_add(&klen, "agentrun-prestart-1") < 0 || key_add(&klen, ids) < 0 ||
	    key_add(&klen, cwd) < 0)
		return;
	for (int i = 2; i < dd; i++) {
		if (key_add(&klen, argv[i]) < 0)
			return;
		/* A policy file's content is part of the key: a stale plan's init
		 * would create its mount points in the workspace (a bind of the
		 * host's) before the Go side finds the plan stale. */
		const char *pf = NULL;
		if ((strcmp(argv[i], "-policy") == 0 || strcmp(argv[i], "--policy") == 0) && i + 1 < dd)
			pf = argv[i + 1];
		else if (strncmp(argv[i], "-policy=", 8) == 0)
			pf = argv[i] + 8;
		else if (strncmp(argv[i], "--policy=", 9) == 0)
			pf = argv[i] + 9;
		if (pf && key_add_file(&klen, pf) < 0)
			return;
	}
	int sv[2] = {-1, -1};
	if (key_add_env(&klen) < 0)
		return;
	char dir[PATH_MAX - 32];
	if (cache_dir(dir, sizeof dir, euid) < 0)
		return;
	char name[24];
	snprintf(name, sizeof name, "%016llx", (unsigned long long)ar_fnv1a((const unsigned char *)key_buf, klen, AR_FNV_OFFSET));
	snprintf(path_buf, sizeof path_buf, "%s/%s", dir, name);
	struct stat st;
	if (stat("/proc/self/exe", &st) < 0)
		return;
	result = (struct ar_prestart){
		.state = AR_PRESTART_MISS,
		.path = path_buf,
		.key = key_buf,
		.keylen = klen,
		.exe_dev = (uint64_t)st.st_dev,
		.exe_ino = (uint64_t)st.st_ino,
		.exe_size = (uint64_t)st.st_size,
		.exe_ctime_sec = (uint64_t)st.st_ctim.tv_sec,
		.exe_ctime_nsec = (uint64_t)st.st_ctim.tv_nsec,
		/* argv[argc] is NULL. */
		.argv = &argv[dd + 1],
	};

	int fd = ar_open_cached(dir, name, euid, &st);
	if (fd < 0)
		return;
	size_t len = (size_t)st.st_size, pad = (len + 15) & ~(size_t)15, argbytes = 0;
	for (int i = dd + 1; i < argc; i++)
		argbytes += strlen(argv[i]) + 1 + sizeof(char *);
	size_t total = 2 * pad + argbytes + 64;
	unsigned char *mem = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		close(fd);
		return;
	}
	int rd = ar_read_all(fd, mem, len);
	close(fd);
	unsigned char *img = mem + pad;
	const struct ar_image *h = NULL;
	struct ar_plan *p = NULL;
	if (rd == 0) {
		memcpy(img, mem, len);
		p = (struct ar_plan *)ar_image_load(img, len, 1, &h);
	}
	if (!p || h->keylen != klen || memcmp(h->key, key_buf, klen) != 0 || h->exe_dev != result.exe_dev ||
	    h->exe_ino != result.exe_ino || h->exe_size != result.exe_size ||
	    h->exe_ctime_sec != result.exe_ctime_sec || h->exe_ctime_nsec != result.exe_ctime_nsec)
		goto unmap;
	/* A plan with a root template is not this spawn's when the caller
	 * turned templates off (AGENTRUN_TEMPLATE=0, as agentrun.Options). */
	const char *tv = getenv("AGENTRUN_TEMPLATE");
	if (tv && (strcmp(tv, "0") == 0 || strcmp(tv, "off") == 0))
		for (int i = 0; i < h->nprep; i++)
			if (h->prep[i].template)
				goto unmap;
	/* The placeholders: stdio is this process's, the rest is filled in. */
	if (p->fds[0] != 0 || p->fds[1] != 1 || p->fds[2] != 2)
		goto unmap;
	for (int i = 3; i < p->nfds; i++)
		if (p->fds[i] != -1)
			goto unmap;
	if (p->expect_ppid == AR_PPID_SELF)
		p->expect_ppid = getpid();
	p->await_verify = 1;

	/* The command: copied, because the init wipes this process's argument
	 * strings (hide_cmdline) before it executes them. */
	char **av = (char **)(img + pad);
	char *s = (char *)(av + (argc - dd));
	for (int i = dd + 1; i < argc; i++) {
		size_t n = strlen(argv[i]) + 1;
		memcpy(s, argv[i], n);
		av[i - dd - 1] = s;
		s += n;
	}
	av[argc - dd - 1] = NULL;
	p->argv = av;

	/* Go replaces the SIGCHLD disposition when it starts; until then an
	 * ignored one would have the kernel reap the early init on its death,
	 * and its pid could be someone else's by the time Go kills it. */
	struct sigaction chld;
	if (sigaction(SIGCHLD, NULL, &chld) < 0)
		goto unmap;
	if (chld.sa_handler == SIG_IGN || (chld.sa_flags & SA_NOCLDWAIT)) {
		struct sigaction dfl = {.sa_handler = SIG_DFL};
		if (sigaction(SIGCHLD, &dfl, NULL) < 0)
			goto unmap;
	}
	struct stat sst;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		goto unmap;
	if (fstat(sv[1], &sst) < 0)
		goto close_sock;
	init_sock_ino = (unsigned long long)sst.st_ino;
	struct stat xst;
	int xfd = policy_unhashed ? -1 : ar_express_open(dir, name, euid, &xst);
	/* Read before the init starts: it may load the record's filter while
	 * this process checks the rest of the record (early_release). */
	if (xfd >= 0 && ar_express_read(h, xfd, &xst, &p->early_release, &p->early_release_len) == 0) {
		/* With an express record this process will most likely not
		 * start Go (ar_express), and the root the init builds takes
		 * longer than checking the record: the init is started here,
		 * before anything else, and the holders are left for after the
		 * release. No starter process: on a 2-CPU host, where a spawn is
		 * bound by CPU more than by waiting, its creation and exit cost
		 * the spawn 3-6 % (bench/README). The init is cloned from this
		 * stack, as the forked starter's is from its copy of it. */
		pid_t pid;
		int ok = start_core(h, p, sv, -1, 1, &pid) == 0;
		close(sv[1]);
		if (!ok) {
			if (pid > 0)
				kill_reap(pid);
			ar_prestart_reap_holders();
			close(sv[0]);
			/* Go starts the spawn afresh. The record's checks say why
			 * where one of them is the reason (a bind source that
			 * became a symlink fails the tree's open here); they find
			 * no init to take. */
			result.express_held = ar_express(h, euid);
			goto unmap;
		}
		started(mem, total, len, av, policy_unhashed);
		result.state = AR_PRESTART_STARTED;
		result.pid = pid;
		result.sock = sv[0];
		result.express_held = ar_express(h, euid);
		return;
	}
	/* Otherwise the rest (the idmapped trees, the clone with its
	 * namespaces, the id maps) runs in a starter process while this one
	 * goes on to start Go: on a hit it is about two milliseconds that
	 * would otherwise come before the Go runtime's own start. A plain fork
	 * of this process, which has no threads and little memory yet, is
	 * cheap. */
	int pp[2];
	if (pipe2(pp, O_CLOEXEC) < 0)
		goto close_sock;
	pid_t self = getpid();
	long starter = syscall(SYS_clone, SIGCHLD, 0, NULL, NULL, 0);
	if (starter == 0) {
		close(pp[0]);
		start_init(h, p, sv, pp[1], self);
	}
	close(sv[1]);
	close(pp[1]);
	if (starter < 0) {
		close(pp[0]);
		close(sv[0]);
		goto unmap;
	}
	started(mem, total, len, av, policy_unhashed);
	result.state = AR_PRESTART_STARTING;
	result.pid = -1;
	result.starter = (int)starter;
	result.starter_fd = pp[0];
	result.sock = sv[0];
	return;

close_sock:
	close(sv[0]);
	close(sv[1]);
unmap:
	munmap(mem, total);
}

/* The starter's messages to the constructor's process: the init's pid as
 * soon as it exists (ok 0), so that the init can be killed and reaped
 * whatever becomes of the starter, then ok 1 once its maps are written and
 * it got "g". A failure before the clone sends pid -1. */
struct started {
	int pid; /* the init (a child of the constructor's process), or -1 */
	int ok;
};

/* How long ar_prestart_take waits for the starter's messages: its work
 * takes milliseconds; one that was stopped must not hold the CLI. */
#define STARTER_WAIT_MS 2000

static void report_started(int fd, int pid, int ok)
{
	struct started m = {.pid = pid, .ok = ok};
	while (write(fd, &m, sizeof m) < 0 && errno == EINTR)
		;
}

/* start_core starts the init: it clones the trees to idmap, starts the
 * holders, clones the init, idmaps the trees, writes the init's id maps
 * and lets it go. It runs in the forked starter (own 0), which reports on
 * out and reaps the holders itself, or in the constructor's process
 * itself (own 1), which leaves the holders to the express path and closes
 * the trees once the init has its copies. 0 with *pidp the init, or -1 with
 * *pidp the init if it was cloned (for the caller to kill), else -1. */
static int start_core(const struct ar_image *h, struct ar_plan *p, int sv[2], int out, int own, pid_t *pidp)
{
	int trees[max_holders], pid = -1, nheld = 0, ntrees = 0, ret = -1;
	struct holder held[max_holders];
	char pp[64];
	int *fds = (int *)p->fds;
	for (int i = 0; i < h->nprep; i++) {
		held[i] = (struct holder){.pid = -1, .wr = -1};
		trees[i] = h->prep[i].template ? template_lock(h->prep[i].source) : prep_open(&h->prep[i]);
		if (trees[i] < 0)
			goto out;
		ntrees++;
		fds[h->prep[i].fd_index] = trees[i];
		nheld++;
		if (!h->prep[i].template && holder_start(&held[i]) < 0)
			goto out;
	}
	for (int i = 3; i < p->nfds; i++)
		if (i != p->sync_fd && p->fds[i] < 0)
			goto out;
	fds[p->sync_fd] = sv[1];
	/* The forked starter clones the init as a sibling (CLONE_PARENT): the
	 * init is the constructor process's child, which waits for it, and
	 * its parent death signal follows that process's main thread. */
	if (!own)
		p->clone_flags |= CLONE_PARENT;
	pid = ar_start(p);
	if (pid < 0)
		goto out;
	if (out >= 0)
		report_started(out, pid, 0);
	for (int i = 0; i < h->nprep; i++)
		if (!h->prep[i].template && prep_idmap(&h->prep[i], trees[i], &held[i], own) < 0)
			goto out;
	if ((h->setgroups && (proc_path(pp, sizeof pp, pid, "setgroups") < 0 || ar_write_text(pp, h->setgroups) < 0)) ||
	    (h->uid_map && (proc_path(pp, sizeof pp, pid, "uid_map") < 0 || ar_write_text(pp, h->uid_map) < 0)) ||
	    (h->gid_map && (proc_path(pp, sizeof pp, pid, "gid_map") < 0 || ar_write_text(pp, h->gid_map) < 0)) ||
	    send(sv[0], "g", 1, MSG_NOSIGNAL) != 1)
		goto out;
	ret = 0;
out:
	/* The forked starter's holders are reaped before it reports: the CLI
	 * kills it right after reading the report. */
	for (int i = 0; i < nheld; i++)
		(own ? holder_leave : holder_reap)(&held[i]);
	if (own)
		for (int i = 0; i < ntrees; i++)
			close(trees[i]);
	*pidp = pid;
	return ret;
}

/* start_init is the forked starter: start_core, then the report. */
static _Noreturn void start_init(const struct ar_image *h, struct ar_plan *p, int sv[2], int out, pid_t parent)
{
	/* With the constructor's process gone, nobody is left to adopt or
	 * kill what this would start. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != parent)
		_exit(1);
	pid_t pid;
	if (start_core(h, p, sv, out, 0, &pid) == 0) {
		report_started(out, pid, 1);
		_exit(0);
	}
	/* The init, if any, is the constructor's child: killed here, reaped
	 * there (which knows its pid from the first message). */
	if (pid > 0)
		kill(pid, SIGKILL);
	else
		report_started(out, -1, 0);
	_exit(1);
}

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* read_started reads one message; 0 on success, -1 on EOF, an error or the
 * deadline (CLOCK_MONOTONIC ms; signals, which Go's handlers turn into
 * EINTR, do not extend it). */
static int read_started(int fd, struct started *m, long long deadline)
{
	struct pollfd pf = {.fd = fd, .events = POLLIN};
	int r;
	do {
		long long left = deadline - now_ms();
		r = left > 0 ? poll(&pf, 1, (int)left) : 0;
	} while (r < 0 && errno == EINTR);
	if (r <= 0)
		return -1;
	ssize_t n;
	do
		n = read(fd, m, sizeof *m);
	while (n < 0 && errno == EINTR);
	return n == (ssize_t)sizeof *m ? 0 : -1;
}

ssize_t ar_read_text(const char *path, char *buf, size_t n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t r = read(fd, buf, n - 1);
	close(fd);
	if (r <= 0)
		return -1;
	buf[r] = 0;
	return r;
}

/* holds_init_socket: pid has the init's end of the sync socket open. Only
 * an init started for this process can: the starter passed it to the init
 * alone and closed its own copy. */
static int holds_init_socket(int pid)
{
	char path[64], want[48], got[64];
	if (snprintf(path, sizeof path, "/proc/%d/fd", pid) >= (int)sizeof path)
		return 0;
	snprintf(want, sizeof want, "socket:[%llu]", init_sock_ino);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	int fd = dirfd(d), found = 0;
	for (struct dirent *e; !found && (e = readdir(d));) {
		ssize_t n = e->d_name[0] == '.' ? -1 : readlinkat(fd, e->d_name, got, sizeof got - 1);
		if (n > 0) {
			got[n] = 0;
			found = strcmp(got, want) == 0;
		}
	}
	closedir(d);
	return found;
}

/* lost_init finds an init the starter cloned but died before naming: the
 * child of this process that holds the init's end of the sync socket. */
static int lost_init(void)
{
	char path[64], buf[4096];
	int found = -1;
	DIR *tasks = opendir("/proc/self/task");
	if (!tasks)
		return -1;
	for (struct dirent *t; found < 0 && (t = readdir(tasks));) {
		if (t->d_name[0] == '.' || snprintf(path, sizeof path, "/proc/self/task/%.16s/children", t->d_name) >= (int)sizeof path ||
		    ar_read_text(path, buf, sizeof buf) < 0)
			continue;
		char *save = NULL;
		for (char *tok = strtok_r(buf, " \n", &save); found < 0 && tok; tok = strtok_r(NULL, " \n", &save)) {
			int kid = atoi(tok);
			if (kid > 0 && holds_init_socket(kid))
				found = kid;
		}
	}
	closedir(tasks);
	return found;
}

static struct ar_prestart take(int keep_holders);

void ar_prestart_put_back(const struct ar_prestart *r)
{
	result = *r;
}

struct ar_prestart ar_prestart_take(void)
{
	return take(0);
}

struct ar_prestart ar_prestart_take_express(void)
{
	return take(1);
}

static struct ar_prestart take_started(struct ar_prestart r);

/* take is ar_prestart_take; with keep_holders, the holders start_core left
 * stay for the caller to reap. */
static struct ar_prestart take(int keep_holders)
{
	struct ar_prestart r = result;
	result.state = AR_PRESTART_OFF;
	if (r.state == AR_PRESTART_STARTING)
		r = take_started(r);
	if (!keep_holders)
		ar_prestart_reap_holders();
	return r;
}

/* take_started reads the forked starter's report and reaps it. */
static struct ar_prestart take_started(struct ar_prestart r)
{
	/* The starter is done by now, as a rule: it started with the process,
	 * before the Go runtime. */
	struct started first = {.pid = -1}, second = {.pid = -1};
	long long deadline = now_ms() + STARTER_WAIT_MS;
	int ok = read_started(r.starter_fd, &first, deadline) == 0 && first.pid > 0 &&
		 read_started(r.starter_fd, &second, deadline) == 0 && second.pid == first.pid && second.ok;
	close(r.starter_fd);
	/* Its work is done or given up either way; a stopped starter must not
	 * hold this process in waitpid. */
	kill_reap(r.starter);
	if (ok) {
		r.state = AR_PRESTART_STARTED;
		r.pid = first.pid;
		return r;
	}
	/* The starter failed, or died between the clone and its first
	 * message. */
	int init = first.pid > 0 ? first.pid : lost_init();
	if (init > 0)
		kill_reap(init);
	close(r.sock);
	munmap(image_map, image_map_len);
	r.argv = cmd_argv;
	r.state = AR_PRESTART_MISS;
	r.pid = r.sock = -1;
	r.image = NULL;
	r.image_len = 0;
	return r;
}

/* fastpath_start is the fast path's constructor: it runs after the init's
 * own (AR_CTOR_INIT), whose records of the process an init needs, and
 * before the Go runtime starts. */
__attribute__((constructor(AR_CTOR_FASTPATH))) static void fastpath_start(void)
{
	int argc;
	char **argv, **envp;
	if (ar_start_args(&argc, &argv, &envp) != 0)
		return;
	if (argc > 1 && argv[1] && strcmp(argv[1], "exec") == 0)
		ar_session_exec(argc, argv);
	ar_prestart(argc, argv, envp);
}
