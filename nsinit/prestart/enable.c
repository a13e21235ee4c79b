//go:build linux && cgo

/* Read by the constructor in nsinit/internal/cinit/prestart.c, which
 * declares it weak: present only in binaries that import this package. */
const int ar_prestart_enabled = 1;
