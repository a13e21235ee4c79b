//go:build linux && cgo

/*
 * sigfwd.c: forward signals that reach this process to the sandbox's init
 * (contract in cinit.h).
 *
 * os/signal would do the same through the Go runtime: a thread of its own
 * and a round trip to it for each signal hooked, on every spawn. Handlers
 * installed here after the runtime started replace Go's for these signals
 * only (os/signal's documentation allows non-Go handlers that use
 * SA_ONSTACK) and make one system call when a signal arrives.
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
/* The target: a pidfd, or a pid when the kernel has no pidfds; neither
 * while there is none (yet, or any more). */
static atomic_int fwd_fd = -1;
static atomic_int fwd_pid;
/* Signals that came while there was no target (bit n-1: signal n). */
static atomic_ullong fwd_pending;
/* Handlers between their first and last access of the fields above. */
static atomic_int fwd_inflight;
static int fwd_sigs[AR_SIGFWD_MAX];
static struct sigaction fwd_old[AR_SIGFWD_MAX];
static int fwd_n;

static void send_to(int fd, int pid, int sig)
{
	if (fd >= 0 && syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0) == 0)
		return;
	/* A kernel or an outer filter that refuses pidfd_send_signal: the
	 * pid stays the init's until detach, which comes before its reaping
	 * (nsinit waits with WNOWAIT first). */
	if (pid > 0 && (fd < 0 || errno == ENOSYS || errno == EPERM))
		(void)kill(pid, sig);
}

static void fwd_handler(int sig)
{
	int saved = errno;
	atomic_fetch_add(&fwd_inflight, 1);
	int fd = atomic_load(&fwd_fd), pid = atomic_load(&fwd_pid);
	if (fd >= 0 || pid > 0)
		send_to(fd, pid, sig);
	else
		atomic_fetch_or(&fwd_pending, 1ULL << (sig - 1));
	atomic_fetch_sub(&fwd_inflight, 1);
	errno = saved;
}

/* quiesce returns once no handler that may have read the old target or
 * may still record a pending signal is running. */
static void quiesce(void)
{
	while (atomic_load(&fwd_inflight) > 0)
		sched_yield();
}

/* restore puts back the first n saved handlers, last first. */
static void restore(int n)
{
	for (int i = n - 1; i >= 0; i--)
		(void)sigaction(fwd_sigs[i], &fwd_old[i], NULL);
}

int ar_sigfwd_install(const int *sigs, int n)
{
	int idle = 0;
	if (n < 1 || n > AR_SIGFWD_MAX)
		return -EINVAL;
	for (int i = 0; i < n; i++) {
		if (sigs[i] < 1 || sigs[i] > 64 || sigs[i] >= NSIG || sigs[i] == SIGKILL || sigs[i] == SIGSTOP)
			return -EINVAL;
		for (int j = 0; j < i; j++)
			if (sigs[j] == sigs[i])
				return -EINVAL;
	}
	if (!atomic_compare_exchange_strong(&fwd_busy, &idle, 1))
		return -EBUSY;
	atomic_store(&fwd_fd, -1);
	atomic_store(&fwd_pid, 0);
	atomic_store(&fwd_pending, 0);
	/* All signals blocked while the handler runs: it cannot nest. */
	struct sigaction sa = {.sa_handler = fwd_handler, .sa_flags = SA_ONSTACK | SA_RESTART};
	sigfillset(&sa.sa_mask);
	for (int i = 0; i < n; i++) {
		fwd_sigs[i] = sigs[i];
		if (sigaction(sigs[i], &sa, &fwd_old[i]) < 0) {
			int e = errno;
			restore(i);
			atomic_store(&fwd_busy, 0);
			return -e;
		}
	}
	fwd_n = n;
	return 0;
}

void ar_sigfwd_attach(int pidfd, int pid)
{
	atomic_store(&fwd_fd, pidfd);
	atomic_store(&fwd_pid, pid);
	/* A handler that saw no target has recorded its signal once this
	 * returns; later ones see the target. */
	quiesce();
	unsigned long long m = atomic_exchange(&fwd_pending, 0);
	for (int s = 1; s <= 64; s++)
		if (m & (1ULL << (s - 1)))
			send_to(pidfd, pid, s);
}

static void detach(void)
{
	/* The pid first: a handler reads fd, then pid, so it cannot see the
	 * old pid without the old fd. */
	atomic_store(&fwd_pid, 0);
	atomic_store(&fwd_fd, -1);
	quiesce();
}

int ar_sigfwd_detach(void)
{
	detach();
	return 0;
}

int ar_sigfwd_uninstall(void)
{
	if (!atomic_load(&fwd_busy))
		return 0;
	restore(fwd_n);
	fwd_n = 0;
	detach();
	atomic_store(&fwd_pending, 0);
	atomic_store(&fwd_busy, 0);
	return 1;
}

int ar_sigfwd_uninstall_raise(void)
{
	unsigned long long m = atomic_load(&fwd_pending);
	int r = ar_sigfwd_uninstall();
	for (int s = 1; s <= 64; s++)
		if (m & (1ULL << (s - 1)))
			(void)raise(s);
	return r;
}
