//go:build linux && cgo

/*
 * cinit.h: the sandbox init as plain C, cloned straight from the Go parent.
 *
 * The Go parent (nsinit) compiles the OCI Spec into a flat plan and calls
 * ar_start on a locked OS thread. ar_start clones a child into the plan's
 * namespaces without CLONE_VM: the child is a copy-on-write image of the Go
 * process with a single thread. It never returns into Go, never allocates
 * and never takes a lock (other threads of the parent may have held one at
 * the moment of the clone): it only makes system calls and uses its stack
 * and the (copied) plan. The init reports to the parent over the sync
 * socket in small JSON messages (nsinit's report).
 */
#ifndef AGENTRUN_CINIT_H
#define AGENTRUN_CINIT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
struct stat;

/* The init's exit status when the sandbox could not be built: the spawn
 * contract's 125 (agentrun.ExitSetupFailed, checked by a test). */
#define AR_EXIT_SETUP_FAILED 125

/* The OCI mount type of the root template's bind (mounts.TypeRootTemplate,
 * checked by a test). */
#define AR_TYPE_ROOT_TEMPLATE "agentrun-root-template"

enum {
	AR_MOUNT_BIND = 1,    /* attach a clone of a host path (or a prepared tree) */
	AR_MOUNT_FS = 2,      /* new filesystem instance via fsopen/fsmount */
	AR_MOUNT_SYMLINK = 3, /* symlink at dest pointing at source */
	AR_MOUNT_COPY = 4,    /* copy of the regular file source at dest */
};

/* A filesystem parameter for fsconfig; value NULL is a flag. */
struct ar_fsparam {
	const char *key;
	const char *value;
};

struct ar_mount {
	int kind;
	int fd;        /* bind: child fd of a tree the parent prepared, or for
	                * the root template of its lock file; else -1 */
	int recursive; /* bind: clone the whole subtree (rbind) */
	uint64_t attr; /* MOUNT_ATTR_* of the new mount */
	const char *type;   /* the OCI type, for error messages */
	const char *dest;   /* clean absolute path inside the new root */
	const char *source; /* bind: host path; fs: filesystem type; symlink: target */
	const struct ar_fsparam *params;
	int nparams;
};

struct ar_device {
	const char *path; /* host device node to clone */
	const char *dest; /* clean absolute path inside the new root */
};

struct ar_rlimit {
	const char *name; /* for error messages */
	int resource;
	uint64_t soft, hard;
};

struct ar_plan {
	uint64_t clone_flags; /* CLONE_NEW* */
	int cgroup_fd;        /* CLONE_INTO_CGROUP target (parent fd), -1: none */
	/* v1 "tasks" files (parent fds): the child writes "0" to each first,
	 * joining the cgroups as a single thread (no thread-group lock). */
	const int *task_fds;
	int ntask_fds;
	/* Addresses in the Go heap (and goroutine stacks): the child drops its
	 * copy of the mappings holding them first thing. */
	uintptr_t heap[4];
	int nheap;

	/* Parent fds that become the child's fds 0..nfds-1 (stdio, the sync
	 * socket, prepared trees); every other fd is closed in the child. */
	const int *fds;
	int nfds;
	int sync_fd; /* the sync socket in the child's numbering */

	uint32_t uid, gid;
	int drop_groups; /* setgroups(0, NULL): root mode, host groups must go */
	int expect_ppid; /* getppid() after PR_SET_PDEATHSIG, -1: do not check */
	int unshare_cgroupns; /* once released, i.e. inside its cgroup */

	const char *hostname; /* NULL: keep */
	const struct ar_mount *mounts;
	int nmounts;
	const struct ar_device *devices;
	int ndevices;
	const char *const *masked;
	int nmasked;
	const char *const *readonly;
	int nreadonly;
	int root_readonly;
	int loopback;

	const char *cwd;
	const struct ar_rlimit *rlimits;
	int nrlimits;
	char *const *argv; /* NULL-terminated */
	char *const *envp; /* NULL-terminated */
	const char *path;  /* PATH for the command lookup ("" when unset) */
	int no_new_privs;
	uint32_t keep_caps[2]; /* capabilities granted to the command (bit n = cap n) */
	/* A prestart: the plan is not known to be this spawn's yet. Before
	 * creating anything inside a host bind (a mount point in the
	 * workspace), and before the release, wait for the parent's 'v' (it
	 * found the plan to be its own). Set by ar_prestart, never part of an
	 * image. */
	int await_verify;
	/* The release the express path will send (its record's), known
	 * before the init starts: the loader may load its filter while the
	 * parent is still checking, and hands it over only if the release
	 * that comes is this one, byte for byte. Set by the constructor,
	 * never part of an image. */
	const unsigned char *early_release;
	size_t early_release_len;
	/* Serve mode (a session): no command. Once the init is confined
	 * exactly as a command would be, it reports "started" and serves
	 * requests (struct ar_req) on the sync socket until the parent hangs
	 * up. Never part of an image. */
	int serve;
};

/*
 * Serve-mode requests (parent -> init), one SEQPACKET message each: the
 * header, then strings_len bytes of NUL-terminated strings: cwd, PATH,
 * argv[0..argc), env[0..envc). An exec request carries one fd
 * (SCM_RIGHTS) per AR_EXEC_FDn bit, in order; the others none. The init
 * has no malloc, so the format is binary and every count is bounded.
 * An AR_EXEC_TTY exec runs on a new pseudo-terminal of the sandbox's own
 * devpts, its controlling terminal, and passes no fd.
 * Replies (init -> parent) are JSON reports carrying the request's id:
 * exec-started (with SCM_RIGHTS: the terminal's master for a TTY exec,
 * then a pidfd when there is one; "tty":1 says the first is the master),
 * exec-error, exec-exit, ack.
 */
#define AR_REQ_MAGIC 0x31515241u /* "ARQ1" */
#define AR_REQ_MAX (160 * 1024)  /* below the default socket buffer */
#define AR_REQ_MAX_STRINGS 16384 /* argc + envc */
#define AR_SERVE_MAX 4096        /* exec'd children tracked at once (the default pids.max) */
enum { AR_REQ_EXEC = 1, AR_REQ_SIGNAL = 2, AR_REQ_SIGNAL_ALL = 3 };
enum { AR_EXEC_FD0 = 1, AR_EXEC_FD1 = 2, AR_EXEC_FD2 = 4, AR_EXEC_TTY = 8, AR_SIG_GROUP = 16 };

struct ar_req {
	uint32_t magic, type;
	uint64_t id;     /* the parent's token, echoed in the reply */
	uint64_t target; /* AR_REQ_SIGNAL: the id of the exec to signal */
	uint32_t flags;  /* AR_EXEC_FD* or AR_EXEC_TTY, AR_SIG_GROUP */
	int32_t sig;
	uint32_t argc, envc, strings_len;
	/* AR_EXEC_TTY: the terminal's rows | columns << 16; otherwise 0. */
	uint32_t winsize;
};

/* A request as ar_parse_req read it; strings point into its buffer. */
struct ar_parsed_req {
	uint32_t type, flags, winsize;
	uint64_t id, target;
	int sig;
	const char *cwd, *path; /* "" cwd: the init's */
	const char **argv, **envp; /* NULL-terminated, in the caller's slots */
};

/* ar_parse_req checks the request in buf (len bytes, received with nfds
 * fds) and fills r, with argv and envp in slots (nslots pointers). 0, or
 * -errno with a short reason in *why; r->id is set whenever the header
 * was complete. */
int ar_parse_req(const void *buf, size_t len, int nfds, struct ar_parsed_req *r, const char **slots, size_t nslots,
		 const char **why);

/* ar_serve_denied: the index of the first system call of serve mode that
 * the filter (n instructions) does not allow, -1 when it allows all;
 * ar_serve_call names one. *pidfd says whether it allows CLONE_PIDFD. */
int ar_serve_denied(const void *filter, size_t n, int sync, int *pidfd);
const char *ar_serve_call(int i);
/* ar_serve_tty_denied names the first call of an exec on a terminal that
 * the filter does not allow, NULL when it allows them all. */
const char *ar_serve_tty_denied(const void *filter, size_t n);

/* The most fds, mounts, devices... a plan may carry: the child keeps
 * per-entry state in arrays on its stack. */
#define AR_MAX_ENTRIES 4096

/* The most v1 "tasks" files a plan or a release message may carry. */
#define AR_MAX_TASK_FDS 64

/*
 * The release message: the parent's second message, sent once the init is
 * in its cgroup and the filter is compiled. A 4-byte SECCOMP_FILTER_FLAG_*
 * word in host byte order, then the filter (struct sock_filter[], possibly
 * empty: no filter).
 */
#define AR_RELEASE_MAX (4 + 4096 * 8)

/*
 * ar_start clones the sandbox init. The child blocks on the sync socket
 * until the parent has written its id maps and sent one byte; it then builds
 * the root while the parent places it in its cgroup and compiles the
 * filter, and blocks again for the release message before it drops its
 * privileges and starts the command. Returns the child's pid or -errno.
 * Call it on a thread that stays alive (locked) until the child is reaped:
 * the parent death signal follows the thread.
 */
int ar_start(const struct ar_plan *plan);

/*
 * ar_userns_holder clones a child into a new user namespace that only
 * blocks reading pipe_rd, so that the parent can write its maps and open
 * /proc/PID/ns/user. The child shares the caller's memory and runs on
 * stack, which must stay mapped until the child has been reaped. Returns
 * the child's pid or -errno.
 */
int ar_userns_holder(int pipe_rd, void *stack, size_t stack_size);

/*
 * Signal forwarding (sigfwd.c). ar_sigfwd_install replaces the handlers
 * of sigs (distinct, catchable, at most AR_SIGFWD_MAX) with one that sends
 * each signal to the target (SA_ONSTACK, which Go requires of non-Go
 * handlers, and SA_RESTART, as Go's own have), and saves the old ones;
 * -EBUSY while another forwarding of this process is installed. Until
 * ar_sigfwd_attach names a target (a pidfd; or the pid, pidfd -1, on a
 * kernel without pidfds) the signals are recorded and sent on there.
 * Attach once per install: ar_sigfwd_detach drops the target, after which
 * signals are only recorded, never sent, and returns once no handler can
 * still use it: the caller may then close the pidfd (or reap the pid).
 * ar_sigfwd_uninstall puts the saved handlers back.
 */
#define AR_SIGFWD_MAX 16
int ar_sigfwd_install(const int *sigs, int n);
void ar_sigfwd_attach(int pidfd, int pid);
int ar_sigfwd_detach(void); /* 0 */
int ar_sigfwd_uninstall(void); /* 1: a forwarding was installed */
/* ar_sigfwd_uninstall, then each signal that was held raised again (for
 * the express path's constructor: as if no handler had been there). */
int ar_sigfwd_uninstall_raise(void);

/*
 * The plan image: a plan as bytes, which nsinit writes (cinit.Image) and
 * the agentrun CLI's constructor starts an init from before its Go runtime
 * starts (cmd/agentrun/internal/fastpath). Nothing is trusted from an
 * image until the Go side has compiled its own plan and found the image
 * byte for byte equal to it; the init blocks before its release until
 * then, and is killed otherwise.
 *
 * An image is one buffer: this header at offset 0, then the plan and
 * everything it points to, with each pointer stored as an offset from the
 * buffer's start; relocs lists where those pointers are. Placeholders that
 * only the starting process knows: argv is NULL (the command comes from
 * the command line), fds[sync_fd] and the prepared trees' slots are -1,
 * and expect_ppid is AR_PPID_SELF when it is the CLI process's pid
 * (getpid() in the constructor).
 */
#define AR_IMAGE_MAGIC 0x31535041u /* "APS1" */
#define AR_IMAGE_MAX (1 << 20)
#define AR_PPID_SELF (-2)

/* An idmapped bind that start_core prepares as a detached tree (nsinit's
 * prepareMounts): source opened without following symlinks, cloned, and
 * given attr (MOUNT_ATTR_IDMAP included) with a user namespace that has
 * these maps. Or the root template (template below). */
struct ar_prep {
	const char *source;
	const char *uid_map, *gid_map; /* "inside outside count\n" lines */
	uint64_t attr;
	int recursive;
	int fd_index; /* its slot in plan->fds */
	/* 1: not a tree but the root template's lock file (source;
	 * mounts/template_linux.go), opened and locked shared without
	 * waiting; the maps are empty. */
	int template;
};

struct ar_image {
	uint32_t magic, version;
	uint64_t size;     /* of the whole image */
	uint64_t checksum; /* FNV-1a 64 of the image with this field zero */
	/* The binary that wrote it: a new build invalidates every image. The
	 * ctime changes with any write, which no one can set back. */
	uint64_t exe_dev, exe_ino, exe_size, exe_ctime_sec, exe_ctime_nsec;
	uint64_t relocs, nrelocs; /* offset of a uint64_t[nrelocs] */
	const char *key; /* what the cache is keyed by, keylen bytes */
	uint64_t keylen;
	const struct ar_plan *plan;
	/* The init's /proc/PID/{setgroups,uid_map,gid_map}; NULL: not written. */
	const char *setgroups, *uid_map, *gid_map;
	const struct ar_prep *prep;
	int nprep;
};


/* Constructor priorities: the init's records of the process first, then
 * the CLI's fast path, which may start an init that needs them. */
#define AR_CTOR_INIT 101
#define AR_CTOR_FASTPATH 102

/* ar_start_args gives the process's arguments and environment as the
 * constructor found them (on musl, where constructors get none, from the
 * initial stack): 0, or -1 when they could not be found. */
int ar_start_args(int *argc, char ***argv, char ***envp);

/*
 * ar_initial_args_agree: 1 when the arguments a musl build's constructor
 * finds on the initial stack (initial_args) are the ones glibc passed this
 * process's constructor; for tests of a glibc build.
 */
int ar_initial_args_agree(void);

/*
 * For tests of the loader's check (cinit.c, handover_allowed): whether the
 * filter (n instructions) allows system call nr with the arguments whose
 * bits are set in known, and whether it allows the whole handover.
 */
int ar_filter_allows(const void *filter, size_t n, uint32_t nr, unsigned known, const uint64_t *args);
int ar_handover_allowed(const void *filter, size_t n, unsigned flags);

/* FNV-1a 64 of p, continuing h (AR_FNV_OFFSET to start): the image's
 * checksum, and what the CLI's fast path names its cache files by. */
#define AR_FNV_OFFSET 0xcbf29ce484222325ULL
uint64_t ar_fnv1a(const unsigned char *p, uint64_t n, uint64_t h);
/* ar_hexval is the value of a lower-case hex digit, -1 for anything else. */
static inline int ar_hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* ar_image_load validates img (len bytes, writable, relocated in place)
 * and returns its plan, or NULL with errno set. check_sum 0 skips the
 * checksum, for tests that exercise the structural checks. */
const struct ar_plan *ar_image_load(unsigned char *img, uint64_t len, int check_sum, const struct ar_image **hdr);

#endif
