//go:build linux && cgo

/*
 * fastpath.h: the agentrun CLI's fast path, before and instead of its Go
 * runtime: prestart (prestart.c) starts a spawn's init from a plan image an
 * earlier spawn with the same command line cached, and the express path
 * (express.c) runs the whole spawn without Go when a record of what else
 * that spawn needed still holds. What they share with the init (the plan,
 * the image format, ar_start, the holders, signal forwarding) is cinit.h.
 */
#ifndef AGENTRUN_FASTPATH_H
#define AGENTRUN_FASTPATH_H

#include "cinit.h"

/* What the constructor started, for the Go side (ar_prestart_take). */
enum {
	AR_PRESTART_OFF = 0,     /* not the CLI's spawn, or disabled */
	AR_PRESTART_MISS = 1,    /* no usable image: key and path are set */
	AR_PRESTART_STARTED = 2, /* an init runs from the image */
	AR_PRESTART_STARTING = 3, /* internal: the starter has not reported yet */
};

struct ar_prestart {
	int state;
	int pid, sock;  /* STARTED: the init and the parent's end of its sync socket */
	int starter, starter_fd; /* STARTING: the starter process and its report pipe */
	const unsigned char *image; /* STARTED: the image as read, before relocation */
	uint64_t image_len;
	char *const *argv; /* the command after the first "--" (STARTED: the init's) */
	const char *path;  /* the cache file for this key */
	const char *key;
	uint64_t keylen;
	uint64_t exe_dev, exe_ino, exe_size, exe_ctime_sec, exe_ctime_nsec;
	/* The express record held, but the express path stood aside for
	 * another reason: Go need not write it again. */
	int express_held;
	/* The key names a policy file it could not hash: the express path
	 * never applies, so Go writes no record for it. */
	int no_express;
};

/* ar_prestart runs in the CLI's constructor (fastpath_start, after the
 * init's own: AR_CTOR_FASTPATH); ar_prestart_take hands its result to the
 * Go side once: later calls see AR_PRESTART_OFF. */
void ar_prestart(int argc, char **argv, char **envp);

/* ar_session_exec runs `agentrun exec ID -- CMD...` through the session's
 * socket and exits with the command's status; it returns, having sent
 * nothing, for anything it leaves to Go (sessexec.c). */
void ar_session_exec(int argc, char **argv);

/* The environment variables whose values are part of the key. */
const char *const *ar_prestart_pass_env(void);
struct ar_prestart ar_prestart_take(void);
/* ar_prestart_take_express is ar_prestart_take for the express path: the
 * userns holders of an init started in this process are left for
 * ar_prestart_reap_holders, which reaps them once the release is sent,
 * when it costs the spawn nothing; ar_prestart_take reaps them itself. */
struct ar_prestart ar_prestart_take_express(void);
void ar_prestart_reap_holders(void);
/* ar_express_parse_leaf reads an express cgroup's name (express.c). */
int ar_express_parse_leaf(const char *name, unsigned long long *pid, unsigned long long *start, unsigned long long *ns);

/* ar_write_all writes all n bytes (EINTR retried): 0, or -1. */
int ar_write_all(int fd, const void *buf, size_t n);
/* ar_write_text writes s to the existing file path: 0, or -1. */
int ar_write_text(const char *path, const char *s);
/* ar_read_all reads exactly n bytes: 0, or -1. */
int ar_read_all(int fd, void *buf, size_t n);
/* ar_read_text reads up to n-1 bytes of a small file (a /proc one) in one
 * read into buf, NUL-terminated; its length, or -1. */
ssize_t ar_read_text(const char *path, char *buf, size_t n);

/* ar_prestart_put_back undoes ar_prestart_take: the express path took
 * the init and then left the spawn to Go. */
void ar_prestart_put_back(const struct ar_prestart *r);
/* ar_open_cached opens dir/name if this user alone can have written it
 * (st: the file's). */
int ar_open_cached(const char *dir, const char *name, uid_t euid, struct stat *st);

/*
 * The express path (express.c). Go writes, next to an image it adopted
 * an init from, a record of what else that spawn needed (Express in
 * record_linux.go): a text file "<image>.express" of lines
 *	agentrun-express 1
 *	image <the image's checksum, 16 hex digits>
 *	signals <forwarded signal numbers, each after a space>
 *	cgroup\t<state dir>\t<parent name>\t<parent cgroup dir>\t<pids.max>
 *	  or, for a sandbox Go ran without a cgroup: no-cgroup\t<state dir>
 *	release <the release message, hex>
 *	<fingerprints: L, R, E, C and A lines, Express>
 *	end
 * ar_express_open opens the record of the image dir/name (ar_open_cached),
 * -1 when there is none or AGENTRUN_EXPRESS turns the path off; ar_prestart
 * opens it before the init starts: with a record, it starts the init
 * itself, otherwise a starter process does.
 * ar_express_read, called by ar_prestart before the init starts, reads and
 * closes fd: 0 when it holds a record for img, whose release message it
 * points *rel at (the plan's early_release); -1 otherwise.
 * ar_express, called by ar_prestart once it started the init from the image
 * itself (or failed to, when there is no init to take) and ar_express_read
 * found the record, runs the spawn to its end and
 * exits when every fingerprint still holds and the cgroup can be made;
 * otherwise it returns with nothing changed, 1 when the record held all
 * the same.
 */
/* The express record's name next to its image, and the prefix of the
 * express path's cgroups (the Go side's expressSuffix and
 * cgroups.ExpressPrefix, held equal by a test). */
#define EXPRESS_SUFFIX ".express"
#define EXPRESS_LEAF_PREFIX "sbe-"
int ar_express_open(const char *dir, const char *name, uid_t euid, struct stat *st);
int ar_express_read(const struct ar_image *img, int fd, const struct stat *st, const unsigned char **rel, size_t *rel_len);
int ar_express(const struct ar_image *img, uid_t euid); /* 1: the record held */

#endif
