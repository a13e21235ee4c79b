//go:build linux && cgo

/*
 * image.c: reading a plan image (cinit.h): the checksum, the relocation of
 * its pointers and the bounds of everything it points to. The CLI's fast
 * path starts an init from an image only once ar_image_load accepted it.
 */
#define _GNU_SOURCE
#include "cinit.h"

#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <linux/sched.h>

uint64_t ar_fnv1a(const unsigned char *p, uint64_t n, uint64_t h)
{
	for (uint64_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* ---- validating an image ---- */

struct bounds {
	uintptr_t lo, hi;
};

static int in(const struct bounds *b, const void *p, uint64_t n)
{
	uintptr_t a = (uintptr_t)p;
	return a >= b->lo && a <= b->hi && n <= b->hi - a;
}

/* str_ok: NULL, or a NUL-terminated string inside the image. */
static int str_ok(const struct bounds *b, const char *s)
{
	if (!s)
		return 1;
	return in(b, s, 1) && memchr(s, 0, b->hi - (uintptr_t)s) != NULL;
}

static int arr_ok_(const struct bounds *b, const void *p, int n, size_t elem, size_t align)
{
	if (n < 0 || n > AR_MAX_ENTRIES)
		return 0;
	if (n == 0)
		return !p || in(b, p, 0);
	return p && ((uintptr_t)p % align) == 0 && in(b, p, (uint64_t)n * elem);
}

/* arr_ok: n elements of *p, aligned for their type, inside the image. */
#define arr_ok(b, p, n) arr_ok_((b), (p), (n), sizeof *(p), _Alignof(__typeof__(*(p))))

/* strv_ok: n strings (n < 0: NULL-terminated, the terminator in bounds). */
static int strv_ok(const struct bounds *b, const char *const *v, int n)
{
	if (!v)
		return n <= 0;
	if ((uintptr_t)v % _Alignof(const char *))
		return 0;
	for (int i = 0; n < 0 || i < n; i++) {
		if (i >= AR_MAX_ENTRIES || !in(b, &v[i], sizeof v[i]))
			return 0;
		if (!v[i])
			return n < 0;
		if (!str_ok(b, v[i]))
			return 0;
	}
	return 1;
}

static int disjoint(const void *a, size_t alen, const void *c, size_t clen)
{
	uintptr_t x = (uintptr_t)a, y = (uintptr_t)c;
	return x + alen <= y || y + clen <= x;
}

static int plan_ok(const struct bounds *b, const struct ar_plan *p)
{
	if (!in(b, p, sizeof *p) || (uintptr_t)p % 8)
		return 0;
	if (p->task_fds || p->ntask_fds || p->nheap || p->argv || p->cgroup_fd != -1 || p->await_verify ||
	    p->early_release || p->early_release_len || p->serve)
		return 0;
	/* Whatever else it says, an image's init works in namespaces of its
	 * own: it runs before anything was checked. */
	if ((p->clone_flags & (CLONE_NEWUSER | CLONE_NEWNS)) != (CLONE_NEWUSER | CLONE_NEWNS))
		return 0;
	/* Namespace flags only: the init must be a process of its own, with
	 * its own memory, files and handlers (cinit.c relies on it). */
	if (p->clone_flags & ~(uint64_t)(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
					 CLONE_NEWNET | CLONE_NEWCGROUP))
		return 0;
	if (!arr_ok(b, p->fds, p->nfds) || p->nfds < 4 || p->sync_fd < 3 || p->sync_fd >= p->nfds)
		return 0;
	/* start_core writes into fds after these checks: it must not
	 * overlap anything checked. */
	if (!disjoint(p->fds, (size_t)p->nfds * sizeof *p->fds, p, sizeof *p))
		return 0;
	if (!p->cwd || !p->path || !str_ok(b, p->hostname) || !str_ok(b, p->cwd) || !str_ok(b, p->path))
		return 0;
	if (!arr_ok(b, p->mounts, p->nmounts))
		return 0;
	for (int i = 0; i < p->nmounts; i++) {
		const struct ar_mount *m = &p->mounts[i];
		if (!m->type || !m->dest || !m->source || !str_ok(b, m->type) || !str_ok(b, m->dest) ||
		    !str_ok(b, m->source) || !arr_ok(b, m->params, m->nparams))
			return 0;
		for (int j = 0; j < m->nparams; j++)
			if (!str_ok(b, m->params[j].key) || !str_ok(b, m->params[j].value))
				return 0;
	}
	if (!arr_ok(b, p->devices, p->ndevices))
		return 0;
	for (int i = 0; i < p->ndevices; i++)
		if (!p->devices[i].path || !p->devices[i].dest || !str_ok(b, p->devices[i].path) ||
		    !str_ok(b, p->devices[i].dest))
			return 0;
	if (!strv_ok(b, p->masked, p->nmasked) || !strv_ok(b, p->readonly, p->nreadonly))
		return 0;
	if (!arr_ok(b, p->rlimits, p->nrlimits))
		return 0;
	for (int i = 0; i < p->nrlimits; i++)
		if (!p->rlimits[i].name || !str_ok(b, p->rlimits[i].name))
			return 0;
	return strv_ok(b, (const char *const *)p->envp, -1);
}

const struct ar_plan *ar_image_load(unsigned char *img, uint64_t len, int check_sum, const struct ar_image **hdrp)
{
	struct ar_image *h = (struct ar_image *)img;
	struct bounds b = {(uintptr_t)img, (uintptr_t)img + len};
	errno = EINVAL;
	if (sizeof(void *) != 8 || (uintptr_t)img % 16 || len < sizeof *h || len > AR_IMAGE_MAX)
		return NULL;
	/* The last byte is NUL, so no string can run off the end. */
	if (h->magic != AR_IMAGE_MAGIC || h->version != 1 || h->size != len || img[len - 1] != 0)
		return NULL;
	if (check_sum) {
		uint64_t want = h->checksum;
		h->checksum = 0;
		uint64_t got = ar_fnv1a(img, len, AR_FNV_OFFSET);
		h->checksum = want;
		if (got != want)
			return NULL;
	}
	/* Read once: a relocation may not rewrite the list or its bounds. */
	const uint64_t relocs = h->relocs, nrelocs = h->nrelocs;
	if (relocs % 8 || relocs > len || nrelocs > (len - relocs) / 8)
		return NULL;
	const uint64_t *rel = (const uint64_t *)(img + relocs);
	for (uint64_t i = 0; i < nrelocs; i++) {
		uint64_t at = rel[i];
		/* Only pointer fields: none in the header before key, none in
		 * the list itself. */
		if (at % 8 || at > len - 8 || at < offsetof(struct ar_image, key) ||
		    (at >= relocs && at < relocs + 8 * nrelocs))
			return NULL;
		uint64_t *field = (uint64_t *)(img + at);
		if (*field == 0 || *field >= len)
			return NULL;
		*field += (uint64_t)(uintptr_t)img;
	}
	/* Every pointer is checked after relocation: one that was not listed
	 * still holds a small offset, outside the image. */
	if (!in(&b, h->key, h->keylen) || !str_ok(&b, h->setgroups) || !str_ok(&b, h->uid_map) ||
	    !str_ok(&b, h->gid_map) || !plan_ok(&b, h->plan))
		return NULL;
	if (h->nprep < 0 || h->nprep > 16 || !arr_ok(&b, h->prep, h->nprep) ||
	    !disjoint(h->plan->fds, (size_t)h->plan->nfds * sizeof(int), h->prep, (size_t)h->nprep * sizeof *h->prep) ||
	    !disjoint(h->plan->fds, (size_t)h->plan->nfds * sizeof(int), h, sizeof *h))
		return NULL;
	for (int i = 0; i < h->nprep; i++) {
		const struct ar_prep *pr = &h->prep[i];
		if (!pr->source || !pr->uid_map || !pr->gid_map || !str_ok(&b, pr->source) ||
		    !str_ok(&b, pr->uid_map) || !str_ok(&b, pr->gid_map) || pr->fd_index <= h->plan->sync_fd ||
		    pr->fd_index >= h->plan->nfds || (pr->template != 0 && pr->template != 1))
			return NULL;
	}
	if (hdrp)
		*hdrp = h;
	errno = 0;
	return h->plan;
}
