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
 * and the (copied) plan. The sync protocol on the socket is the one the Go
 * init speaks, so the parent reads the same JSON reports from both.
 */
#ifndef AGENTRUN_CINIT_H
#define AGENTRUN_CINIT_H

#include <stddef.h>
#include <stdint.h>

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
	int fd;        /* bind: child fd of a tree the parent prepared, else -1 */
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
};

/* The most fds, mounts, devices... a plan may carry: the child keeps
 * per-entry state in arrays on its stack. */
#define AR_MAX_ENTRIES 4096

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

#endif
