//go:build linux && cgo

/*
 * sigfwd.c: forward signals that reach this process to the sandbox's init
 * (contract in cinit.h).
 *
 * os/signal would do the same through the Go runtime: a thread of its own
 * and a round trip to it for each signal hooked, on every spawn. A handler
 * installed here after the runtime started replaces Go's for these signals
 * only (os/signal's documentation allows non-Go handlers that use
 * SA_ONSTACK) and makes one system call when a signal arrives.
 */
#define _GNU_SOURCE
#include "cinit.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>
#include <sys/syscall.h>

/* Process-wide, as signal dispositions are: one forwarding at a time. */
static atomic_int fwd_busy;
static atomic_int fwd_fd = -1;
static atomic_int fwd_pid;
/* Handlers between their first and last access of fwd_fd/fwd_pid. */
static atomic_int fwd_inflight;
static int fwd_sigs[AR_SIGFWD_MAX];
static struct sigaction fwd_old[AR_SIGFWD_MAX];
static int fwd_n;

static void fwd_handler(int sig)
{
	int saved = errno;
	atomic_fetch_add(&fwd_inflight, 1);
	int fd = atomic_load(&fwd_fd), pid = atomic_load(&fwd_pid);
	if (fd >= 0)
		(void)syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0);
	else if (pid > 0)
		(void)kill(pid, sig);
	atomic_fetch_sub(&fwd_inflight, 1);
	errno = saved;
}

static void restore(void)
{
	for (int i = 0; i < fwd_n; i++)
		(void)sigaction(fwd_sigs[i], &fwd_old[i], NULL);
	fwd_n = 0;
	atomic_store(&fwd_fd, -1);
	atomic_store(&fwd_pid, 0);
	/* A handler that read the target before it was cleared may still be
	 * using it: the caller closes the pidfd only after this returns. */
	while (atomic_load(&fwd_inflight) > 0)
		sched_yield();
}

int ar_sigfwd_start(int pidfd, int pid, const int *sigs, int n)
{
	int idle = 0;
	if (n < 1 || n > AR_SIGFWD_MAX || (pidfd < 0 && pid <= 0))
		return -EINVAL;
	for (int i = 0; i < n; i++)
		if (sigs[i] < 1 || sigs[i] >= NSIG || sigs[i] == SIGKILL || sigs[i] == SIGSTOP)
			return -EINVAL;
	if (!atomic_compare_exchange_strong(&fwd_busy, &idle, 1))
		return -EBUSY;
	atomic_store(&fwd_fd, pidfd);
	atomic_store(&fwd_pid, pid);
	/* All signals blocked while the handler runs: it cannot nest. */
	struct sigaction sa = {.sa_handler = fwd_handler, .sa_flags = SA_ONSTACK | SA_RESTART};
	sigfillset(&sa.sa_mask);
	for (int i = 0; i < n; i++) {
		if (sigaction(sigs[i], &sa, &fwd_old[i]) < 0) {
			int e = errno;
			restore();
			atomic_store(&fwd_busy, 0);
			return -e;
		}
		fwd_sigs[i] = sigs[i];
		fwd_n = i + 1;
	}
	return 0;
}

int ar_sigfwd_stop(void)
{
	if (!atomic_load(&fwd_busy))
		return 0;
	restore();
	atomic_store(&fwd_busy, 0);
	return 1;
}
