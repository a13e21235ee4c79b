//go:build linux && cgo

/*
 * sessexec.c: `agentrun exec ID -- CMD...` without Go. A command run in a
 * live session is a client of its socket (docs/session-protocol.md): the
 * record names the socket, the request passes this process's fds 0-2, and
 * the exit reply gives the status. Done here, in the constructor, it costs
 * no Go runtime start, which is most of such an exec. Any form it does not
 * handle (flags, a session it cannot find or reach, an unexpected greeting)
 * is left to the Go side before anything is sent; once the request is
 * sent, the exec is this code's to finish.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "fastpath.h"

/* The protocol's frame limit (session.MaxLine). */
#define SX_MAX_LINE (1 << 20)

/* sx_id_ok is lifecycle.ValidID: 1-128 of [A-Za-z0-9_.-], starting with
 * a letter or digit, without "..". */
static int sx_id_ok(const char *id)
{
	size_t n = strlen(id);
	if (n == 0 || n > 128 || strstr(id, ".."))
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = id[i];
		int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
		if (!alnum && (i == 0 || (c != '_' && c != '.' && c != '-')))
			return 0;
	}
	return 1;
}

/* sx_state_dir is lifecycle.StateDir where this code can be sure of it:
 * root's, or a private $XDG_RUNTIME_DIR's; elsewhere Go decides. */
static int sx_state_dir(char *buf, size_t n, uid_t euid)
{
	int r;
	if (euid == 0) {
		r = snprintf(buf, n, "/run/agentrun/sandboxes");
	} else {
		const char *x = getenv("XDG_RUNTIME_DIR");
		struct stat st;
		if (!x || x[0] != '/' || lstat(x, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != euid || (st.st_mode & 077))
			return -1;
		r = snprintf(buf, n, "%s/agentrun/sandboxes", x);
	}
	if (r <= 0 || (size_t)r >= n)
		return -1;
	/* The directory must be this user's alone (statedir.Private). */
	struct stat st;
	if (lstat(buf, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != euid || (st.st_mode & 022))
		return -1;
	return 0;
}

/* sx_field finds "key": in a JSON text the Go side wrote and returns what
 * follows it, or NULL. */
static const char *sx_field(const char *s, const char *key)
{
	char pat[64];
	int n = snprintf(pat, sizeof pat, "\"%s\":", key);
	if (n <= 0 || (size_t)n >= sizeof pat)
		return NULL;
	const char *p = strstr(s, pat);
	return p ? p + n : NULL;
}

/* sx_string copies the JSON string at p (after its key) into buf, undoing
 * the escapes Go writes; 0, or -1 when it is not a string or too long. */
static int sx_string(const char *p, char *buf, size_t n)
{
	if (!p || *p != '"')
		return -1;
	size_t k = 0;
	for (p++; *p && *p != '"'; p++) {
		char c = *p;
		if (c == '\\') {
			p++;
			switch (*p) {
			case 'n': c = '\n'; break;
			case 't': c = '\t'; break;
			case 'r': c = '\r'; break;
			case '"': case '\\': case '/': c = *p; break;
			case 'u': /* \u00XX and the like: shown as '?' */
				for (int i = 0; i < 4 && p[1]; i++)
					p++;
				c = '?';
				break;
			default: return -1;
			}
		}
		if (k + 1 >= n)
			return -1;
		buf[k++] = c;
	}
	if (*p != '"')
		return -1;
	buf[k] = 0;
	return 0;
}

/* sx_read_record reads the session's record and copies its socket path
 * into sock; -1 when it is not a running session's this code can use. */
static int sx_read_record(const char *dir, const char *id, uid_t euid, char *sock, size_t n)
{
	char path[4096], buf[65536];
	if ((size_t)snprintf(path, sizeof path, "%s/%s.json", dir, id) >= sizeof path)
		return -1;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -1;
	struct stat st;
	ssize_t r = -1;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == euid && st.st_size < (off_t)sizeof buf)
		r = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (r <= 0)
		return -1;
	buf[r] = 0;
	const char *state = sx_field(buf, "state"), *serve = sx_field(buf, "serve");
	if (!state || strncmp(state, "\"running\"", 9) != 0 || !serve || strncmp(serve, "true", 4) != 0)
		return -1;
	if (sx_string(sx_field(buf, "socket"), sock, n) < 0)
		return -1;
	/* Only a socket beside the records (session.SocketPath). */
	size_t dl = strlen(dir);
	if (strncmp(sock, dir, dl) != 0 || strncmp(sock + dl, "/s/", 3) != 0 || strstr(sock, ".."))
		return -1;
	return 0;
}

/* sx_line is a reader of the server's lines. */
struct sx_line {
	int fd;
	char *buf;
	size_t have, cap;
};

/* sx_next returns the next line (NUL-terminated, without '\n'), NULL at
 * the end of the stream or on an error. A line's payload ("len") is
 * skipped by the caller through sx_skip. */
static char *sx_next(struct sx_line *l, size_t *consumed)
{
	for (;;) {
		char *nl = memchr(l->buf, '\n', l->have);
		if (nl) {
			*nl = 0;
			*consumed = (size_t)(nl - l->buf) + 1;
			return l->buf;
		}
		if (l->have == l->cap) {
			if (l->cap >= SX_MAX_LINE + 1)
				return NULL;
			size_t nc = l->cap * 2;
			char *nb = realloc(l->buf, nc);
			if (!nb)
				return NULL;
			l->buf = nb, l->cap = nc;
		}
		ssize_t r = read(l->fd, l->buf + l->have, l->cap - l->have);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return NULL;
		l->have += (size_t)r;
	}
}

/* sx_drop removes the first n bytes (a line just read, or a payload). */
static int sx_drop(struct sx_line *l, size_t n)
{
	while (l->have < n) {
		/* A payload longer than what is buffered: read past it. */
		n -= l->have;
		l->have = 0;
		char tmp[4096];
		while (n > 0) {
			ssize_t r = read(l->fd, tmp, n < sizeof tmp ? n : sizeof tmp);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				return -1;
			n -= (size_t)r;
		}
		return 0;
	}
	memmove(l->buf, l->buf + n, l->have - n);
	l->have -= n;
	return 0;
}

/* sx_put appends s to the request being built; -1 when it is too long. */
struct sx_buf {
	char *b;
	size_t n, cap;
};

static int sx_put(struct sx_buf *o, const char *s, size_t n)
{
	if (o->n + n + 1 > o->cap) {
		size_t nc = o->cap ? o->cap : 4096;
		while (o->n + n + 1 > nc)
			nc *= 2;
		if (nc > SX_MAX_LINE)
			return -1;
		char *nb = realloc(o->b, nc);
		if (!nb)
			return -1;
		o->b = nb, o->cap = nc;
	}
	memcpy(o->b + o->n, s, n);
	o->n += n;
	o->b[o->n] = 0;
	return 0;
}

/* sx_put_json appends s as a JSON string. */
static int sx_put_json(struct sx_buf *o, const char *s)
{
	if (sx_put(o, "\"", 1) < 0)
		return -1;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		char esc[8];
		if (c == '"' || c == '\\') {
			esc[0] = '\\', esc[1] = (char)c;
			if (sx_put(o, esc, 2) < 0)
				return -1;
		} else if (c < 0x20) {
			snprintf(esc, sizeof esc, "\\u%04x", c);
			if (sx_put(o, esc, 6) < 0)
				return -1;
		} else if (sx_put(o, (const char *)s, 1) < 0) {
			return -1;
		}
	}
	return sx_put(o, "\"", 1);
}

static _Noreturn void sx_die(const char *msg)
{
	char line[1200];
	int n = snprintf(line, sizeof line, "agentrun: exec: %s\n", msg);
	if (n > 0)
		(void)ar_write_all(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
	_exit(AR_EXIT_SETUP_FAILED);
}

/* sx_send writes a request line, the first bytes carrying fds. */
static int sx_send(int sock, const char *b, size_t n, const int *fds, int nfds)
{
	size_t off = 0;
	if (nfds > 0) {
		union {
			char buf[CMSG_SPACE(3 * sizeof(int))];
			struct cmsghdr align;
		} u;
		memset(&u, 0, sizeof u);
		struct iovec iov = {(void *)b, n};
		struct msghdr m = {0};
		m.msg_iov = &iov;
		m.msg_iovlen = 1;
		m.msg_control = u.buf;
		m.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
		ssize_t r;
		do
			r = sendmsg(sock, &m, MSG_NOSIGNAL);
		while (r < 0 && errno == EINTR);
		if (r <= 0)
			return -1;
		off = (size_t)r;
	}
	while (off < n) {
		ssize_t r = send(sock, b + off, n - off, MSG_NOSIGNAL);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		off += (size_t)r;
	}
	return 0;
}

void ar_session_exec(int argc, char **argv)
{
	if (argc < 5 || strcmp(argv[1], "exec") != 0 || strcmp(argv[3], "--") != 0 || !sx_id_ok(argv[2]))
		return;
	const char *v = getenv("AGENTRUN_EXEC_FAST");
	if (v && (strcmp(v, "0") == 0 || strcmp(v, "off") == 0))
		return;
	/* A terminal is never passed into a session, where a background
	 * process would keep it after this exec: Go relays it. */
	for (int fd = 0; fd <= 2; fd++)
		if (fcntl(fd, F_GETFD) < 0 || isatty(fd))
			return;
	uid_t euid = geteuid();
	char dir[4096], sockpath[4096];
	if (sx_state_dir(dir, sizeof dir, euid) < 0 || sx_read_record(dir, argv[2], euid, sockpath, sizeof sockpath) < 0)
		return;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(sockpath) >= sizeof sa.sun_path)
		return;
	strcpy(sa.sun_path, sockpath);

	struct sx_buf req = {0};
	int ok = sx_put(&req, "{\"op\":\"exec\",\"req\":1,\"args\":[", 29) == 0;
	for (int i = 4; ok && i < argc; i++)
		ok = (i == 4 || sx_put(&req, ",", 1) == 0) && sx_put_json(&req, argv[i]) == 0;
	const char tail[] = "],\"stdin\":\"fd\",\"stdout\":\"fd\",\"stderr\":\"fd\"}\n";
	ok = ok && sx_put(&req, tail, sizeof tail - 1) == 0;
	if (!ok) {
		free(req.b);
		return;
	}

	int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (sock < 0 || connect(sock, (struct sockaddr *)&sa, sizeof sa) < 0) {
		if (sock >= 0)
			close(sock);
		free(req.b);
		return;
	}
	struct sx_line l = {sock, malloc(4096), 0, 4096};
	size_t used;
	char *hello = l.buf ? sx_next(&l, &used) : NULL;
	if (!hello || strncmp(hello, "{\"type\":\"hello\",\"protocol\":1,", 29) != 0) {
		close(sock);
		free(l.buf);
		free(req.b);
		return;
	}
	(void)sx_drop(&l, used);

	/* Signals for the command are taken before the request goes out, so
	 * that none is lost; they go to its process group. */
	sigset_t fwd;
	sigemptyset(&fwd);
	sigaddset(&fwd, SIGINT);
	sigaddset(&fwd, SIGTERM);
	sigaddset(&fwd, SIGHUP);
	sigaddset(&fwd, SIGQUIT);
	sigaddset(&fwd, SIGUSR1);
	sigaddset(&fwd, SIGUSR2);
	int sfd = -1;
	if (sigprocmask(SIG_BLOCK, &fwd, NULL) == 0)
		sfd = signalfd(-1, &fwd, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0) {
		/* Go can forward them: leave the exec to it. */
		sigprocmask(SIG_UNBLOCK, &fwd, NULL);
		close(sock);
		free(l.buf);
		free(req.b);
		return;
	}
	const int stdio[3] = {0, 1, 2};
	if (sx_send(sock, req.b, req.n, stdio, 3) < 0)
		sx_die("the session closed the connection");
	free(req.b);

	char proc[64] = "";
	int pending[8], npending = 0;
	unsigned long next_req = 2;
	for (;;) {
		if (proc[0] && npending > 0) {
			for (int i = 0; i < npending; i++) {
				char sreq[160];
				int n = snprintf(sreq, sizeof sreq, "{\"op\":\"signal\",\"req\":%lu,\"proc\":\"%s\",\"signal\":\"%d\",\"group\":true}\n",
						 next_req++, proc, pending[i]);
				if (n > 0 && (size_t)n < sizeof sreq)
					(void)sx_send(sock, sreq, (size_t)n, NULL, 0);
			}
			npending = 0;
		}
		/* Whole lines already buffered come first. */
		if (!memchr(l.buf, '\n', l.have)) {
			struct pollfd pf[2] = {{sock, POLLIN, 0}, {sfd, POLLIN, 0}};
			if (poll(pf, 2, -1) < 0) {
				if (errno == EINTR)
					continue;
				sx_die("poll failed");
			}
			if (pf[1].revents & POLLIN) {
				struct signalfd_siginfo si;
				while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si)
					if (npending < (int)(sizeof pending / sizeof pending[0]))
						pending[npending++] = (int)si.ssi_signo;
			}
			if (!(pf[0].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
		}
		char *line = sx_next(&l, &used);
		if (!line)
			sx_die("the session ended before the command did");
		char type[32] = "";
		(void)sx_string(sx_field(line, "type"), type, sizeof type);
		const char *reqf = sx_field(line, "req");
		long rq = reqf ? strtol(reqf, NULL, 10) : 0;
		const char *lenf = sx_field(line, "len");
		size_t plen = lenf ? (size_t)strtoul(lenf, NULL, 10) : 0;
		if (strcmp(type, "started") == 0 && rq == 1) {
			if (sx_string(sx_field(line, "proc"), proc, sizeof proc) < 0)
				sx_die("a malformed started reply");
		} else if (strcmp(type, "error") == 0 && rq == 1) {
			char msg[1024] = "the session refused the exec";
			(void)sx_string(sx_field(line, "message"), msg, sizeof msg);
			sx_die(msg);
		} else if (strcmp(type, "exit") == 0 && rq == 1) {
			char err[1024];
			if (sx_string(sx_field(line, "error"), err, sizeof err) == 0)
				sx_die(err);
			const char *code = sx_field(line, "code");
			if (!code)
				sx_die("a malformed exit reply");
			const char *to = sx_field(line, "timed_out");
			if (to && strncmp(to, "true", 4) == 0) {
				static const char m[] = "agentrun: exec: timed out; its process group was killed\n";
				(void)ar_write_all(2, m, sizeof m - 1);
			}
			_exit((int)strtol(code, NULL, 10) & 0xff);
		}
		if (sx_drop(&l, used) < 0 || (plen && sx_drop(&l, plen) < 0))
			sx_die("the session ended before the command did");
	}
}
