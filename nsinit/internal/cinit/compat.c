//go:build linux && cgo

/*
 * compat.c: what a build against musl (Makefile: the CLI is linked with
 * musl-gcc where it is installed) needs from glibc.
 *
 * Debian's libseccomp.a is compiled against glibc with _FORTIFY_SOURCE, and
 * its pseudo-filter-code export (seccomp_export_pfc, which agentrun never
 * calls) refers to glibc's checked fprintf. Everything else it uses, musl
 * has under the same names.
 */
#if defined(__linux__) && !defined(__GLIBC__)
#include <stdarg.h>
#include <stdio.h>

int __fprintf_chk(FILE *f, int flag, const char *fmt, ...);

int __fprintf_chk(FILE *f, int flag, const char *fmt, ...)
{
	(void)flag;
	va_list ap;
	va_start(ap, fmt);
	int r = vfprintf(f, fmt, ap);
	va_end(ap);
	return r;
}
#endif
