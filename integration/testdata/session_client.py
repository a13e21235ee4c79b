#!/usr/bin/env python3
"""A client of the agentrun session protocol, version 1, written from
docs/session-protocol.md alone, with Python's standard library only.

As a library: Connection.open(session_id) finds the session's record in
the state directory, connects to the socket the record names and reads
the hello; exec() starts a process (stdio "null", "pipe", a descriptor
passed with SCM_RIGHTS, or a terminal), and the Proc it returns takes
input, collects the piped output and waits for the exit; state(),
resolve(), events(), wait(), signal(), cancel(), kill(), resize(),
ping() and delete() are the other requests.

As a program: session_client.py [options] ID STEP... runs the steps in
order against the session ID and prints one JSON line: {"ok": bool,
"steps": {STEP: {...}}}. It exits 0 when every step passed, 1 otherwise.
"""

import argparse
import json
import os
import queue
import re
import socket
import stat
import sys
import threading
import time

PROTOCOL = 1
MAX_LINE = 1 << 20  # bytes of a line, its "\n" not counted (section 4)
MAX_PAYLOAD = 1 << 20
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class SessionError(Exception):
    """An error reply (section 7), or a session that cannot be reached."""

    def __init__(self, kind, message, req=None):
        super().__init__("%s: %s" % (kind, message))
        self.kind, self.message, self.req = kind, message, req


# ---------------------------------------------------------------------------
# Finding a session (section 2)


def state_dir():
    """The state directory of this process's effective user (section 2.1)."""
    euid = os.geteuid()
    if euid == 0:
        return "/run/agentrun/sandboxes"
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if xdg and os.path.isabs(xdg):
        try:
            st = os.lstat(xdg)
        except OSError:
            st = None
        if st and stat.S_ISDIR(st.st_mode) and st.st_uid == euid and not st.st_mode & 0o022:
            return os.path.join(xdg, "agentrun", "sandboxes")
    tmp = os.environ.get("TMPDIR", "")
    if not tmp or not os.path.isabs(tmp):
        tmp = "/tmp"
    return os.path.join(tmp, "agentrun-%d" % euid, "sandboxes")


def _private(path, want_dir):
    """Section 11: owned by us, not a symlink, not writable by group or others."""
    st = os.lstat(path)
    kind_ok = stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)
    if not kind_ok or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise SessionError("unavailable", "%s is not private to this user" % path)


def _alive(ident, own_pidns):
    """Section 2.2: whether a record's process identity still runs."""
    if ident.get("pidns") != own_pidns:
        return True  # another PID namespace: cannot be judged
    try:
        with open("/proc/%d/stat" % ident["pid"]) as f:
            text = f.read()
    except OSError:
        return False
    fields = text[text.rindex(")") + 2:].split()  # fields 3, 4, ...
    return fields[0] not in ("Z", "X") and int(fields[19]) == ident.get("start")


def find_session(session_id, directory=None):
    """Reads and checks the record of session_id; returns (record, path)."""
    if not ID_RE.match(session_id) or ".." in session_id:
        raise SessionError("protocol", "invalid session ID %r" % session_id)
    directory = directory or state_dir()
    _private(directory, True)
    path = os.path.join(directory, session_id + ".json")
    try:
        _private(path, False)
        with open(path, "rb") as f:
            rec = json.loads(f.read(64 * 1024 + 1))
    except FileNotFoundError:
        raise SessionError("unavailable", "session %r does not exist" % session_id)
    if rec.get("version") not in (1, 2) or rec.get("id") != session_id:
        raise SessionError("unavailable", "%s: not a record this client knows" % path)
    if not rec.get("serve") or not rec.get("socket"):
        raise SessionError("unavailable", "%r is not a session" % session_id)
    own_pidns = os.stat("/proc/self/ns/pid").st_ino
    state = rec.get("state")
    if state == "running":
        for who in ("owner", "init"):
            if who in rec and not _alive(rec[who], own_pidns):
                state = "stopped"
    if state != "running":
        raise SessionError("unavailable", "session %r is %s" % (session_id, state))
    return rec, path


# ---------------------------------------------------------------------------
# A connection (sections 3 to 8)


class Proc:
    """A process started by Connection.exec."""

    def __init__(self, conn, req, on_data=None):
        self.conn, self.req, self.on_data = conn, req, on_data
        self.proc, self.pid, self.exit, self._err = None, None, None, None
        self.output = {"stdout": bytearray(), "stderr": bytearray()}
        self._started, self._done = threading.Event(), threading.Event()

    @property
    def stdout(self):
        return bytes(self.output["stdout"])

    @property
    def stderr(self):
        return bytes(self.output["stderr"])

    def input(self, data=b"", eof=False):
        """Feeds its piped stdin (section 6.4); no reply on success."""
        for off in range(0, len(data), MAX_PAYLOAD):
            self.conn.send({"op": "input", "proc": self.proc}, data[off:off + MAX_PAYLOAD])
        if eof:
            self.conn.send({"op": "input", "proc": self.proc, "eof": True})

    def wait(self, timeout=None):
        """The exit reply of its exec (section 8)."""
        if not self._done.wait(timeout):
            raise TimeoutError("process %s did not end" % self.proc)
        return self.exit

    def signal(self, sig, group=False):
        return self.conn.call({"op": "signal", "proc": self.proc, "signal": str(sig), "group": group})

    def cancel(self):
        return self.conn.call({"op": "cancel", "proc": self.proc})

    def resize(self, rows, cols):
        return self.conn.call({"op": "resize", "proc": self.proc, "rows": rows, "cols": cols})


class Connection:
    """One connection to a session's socket. Replies are read by a thread of
    its own, so that the connection is always read (section 4)."""

    def __init__(self, path, timeout=30.0):
        self.path, self.timeout = path, timeout
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self._buf = bytearray()
        self._wlock, self._lock = threading.Lock(), threading.Lock()
        self._next = 0
        self._calls, self._execs, self._procs, self._events = {}, {}, {}, {}
        self.stray_errors = []  # error replies without a req of ours
        self.closed = threading.Event()
        hello, _ = self._read()
        if hello is None:
            raise SessionError("unavailable", "connection closed before the hello: "
                               "not this user's session, or the session is ending")
        if hello.get("type") != "hello" or hello.get("protocol") != PROTOCOL:
            self.sock.close()
            raise SessionError("protocol", "unexpected hello %r" % (hello,))
        self.hello = hello
        threading.Thread(target=self._reader, daemon=True).start()

    @classmethod
    def open(cls, session_id, directory=None, timeout=30.0):
        rec, _ = find_session(session_id, directory)
        return cls(rec["socket"], timeout)

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    # Framing (section 4).

    def _read(self):
        """One message and its payload; (None, b"") at end-of-file."""
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                break
            if len(self._buf) > MAX_LINE:
                raise SessionError("protocol", "a line longer than %d bytes" % MAX_LINE)
            chunk = self.sock.recv(65536)
            if not chunk:
                return None, b""
            self._buf += chunk
        if nl > MAX_LINE:
            raise SessionError("protocol", "a line longer than %d bytes" % MAX_LINE)
        msg = json.loads(bytes(self._buf[:nl]))
        del self._buf[:nl + 1]
        n = msg.get("len") or 0
        if not isinstance(n, int) or n < 0 or n > MAX_PAYLOAD:
            raise SessionError("protocol", "a payload of %r bytes" % (n,))
        while len(self._buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None, b""
            self._buf += chunk
        payload = bytes(self._buf[:n])
        del self._buf[:n]
        return msg, payload

    def send(self, msg, payload=b"", fds=()):
        """Writes one request line, its payload, and descriptors with the
        line's first bytes (section 6.2)."""
        if payload:
            msg = dict(msg, len=len(payload))
        line = json.dumps(msg, separators=(",", ":")).encode() + b"\n"
        with self._wlock:
            if fds:
                n = socket.send_fds(self.sock, [line], list(fds))
                line = line[n:]
            if line or payload:
                self.sock.sendall(line + payload)

    def _new_req(self):
        with self._lock:
            self._next += 1
            return self._next

    def _reader(self):
        try:
            while True:
                msg, payload = self._read()
                if msg is None:
                    break
                self._route(msg, payload)
        except (OSError, ValueError, SessionError):
            pass
        finally:
            self.closed.set()
            with self._lock:
                calls, execs, procs = self._calls, self._execs, self._procs
                self._calls, self._execs, self._procs = {}, {}, {}
            for q in calls.values():
                q.put(None)
            for p in list(execs.values()) + list(procs.values()):
                # Section 7: ended with an unknown status.
                if p.exit is None:
                    p.exit = {"code": -1, "error": "the connection ended"}
                p._started.set()
                p._done.set()

    def _route(self, msg, payload):
        kind, req = msg.get("type"), msg.get("req")
        with self._lock:
            if kind == "started" and req in self._execs:
                p = self._execs[req]
                p.proc, p.pid = msg.get("proc"), msg.get("pid")
                self._procs[p.proc] = p
                p._started.set()
                return
            if kind == "data":
                p = self._procs.get(msg.get("proc"))
                if p is not None:
                    p.output.setdefault(msg.get("stream"), bytearray()).extend(payload)
                    if p.on_data:
                        p.on_data(msg.get("stream"), payload)
                return
            if kind == "exit" and req in self._execs and self._execs[req].proc == msg.get("proc"):
                p = self._execs.pop(req)
                self._procs.pop(p.proc, None)
                p.exit = {k: v for k, v in msg.items() if k not in ("type", "req", "proc")}
                p._done.set()
                return
            if kind == "error" and req in self._execs:
                p = self._execs.pop(req)
                p._err = SessionError(msg.get("kind"), msg.get("message"), req)
                p._started.set()
                p._done.set()
                return
            if kind == "event":
                fn = self._events.get(req)
                if fn is not None and "event" in msg:
                    fn(msg["event"])
                return
            if kind in ("ok", "error", "state", "path", "exit") and req in self._calls:
                self._calls.pop(req).put(msg)
                return
            if kind == "error":
                self.stray_errors.append(msg)
            # Anything else: a type or a req this client does not know.

    # Requests (section 6).

    def call(self, msg, on_event=None, timeout=None):
        """Sends a request and returns its one reply; an error reply raises."""
        req = self._new_req()
        q = queue.Queue(1)
        with self._lock:
            self._calls[req] = q
            if on_event is not None:
                self._events[req] = on_event
        if self.closed.is_set():
            raise SessionError("unavailable", "the connection has ended")
        self.send(dict(msg, req=req))
        try:
            rep = q.get(timeout=timeout or self.timeout)
        except queue.Empty:
            raise TimeoutError("no reply to %s" % msg.get("op"))
        if rep is None:
            raise SessionError("unavailable", "the connection ended before the reply to %s" % msg.get("op"))
        if rep.get("type") == "error":
            raise SessionError(rep.get("kind"), rep.get("message"), req)
        return rep

    def exec(self, args=None, shell=None, stdin="null", stdout="pipe", stderr=None,
             cwd=None, env=None, replace_env=False, timeout_ms=0, max_output_bytes=0,
             wait_delay_ms=None, detach=False, tty=None, on_data=None):
        """Starts a process (section 6.2). A stream given as an int is that
        descriptor, passed with the request ("fd" mode); stderr defaults to
        "pipe", or "null" with a terminal; tty is (rows, cols). Returns
        once the process has started."""
        msg = {"op": "exec"}
        if args is not None:
            msg["args"] = list(args)
        if shell is not None:
            msg["shell"] = shell
        if stderr is None:
            stderr = "null" if tty else "pipe"
        fds = []
        for name, mode in (("stdin", stdin), ("stdout", stdout), ("stderr", stderr)):
            if isinstance(mode, int):
                fds.append(mode)
                mode = "fd"
            msg[name] = mode
        if tty is not None:
            msg["tty"] = {"rows": tty[0], "cols": tty[1]}
        optional = {"cwd": cwd, "env": env, "replace_env": replace_env, "timeout_ms": timeout_ms,
                    "max_output_bytes": max_output_bytes, "detach": detach}
        msg.update({k: v for k, v in optional.items() if v})
        if wait_delay_ms is not None:
            msg["wait_delay_ms"] = wait_delay_ms
        req = self._new_req()
        p = Proc(self, req, on_data)
        with self._lock:
            self._execs[req] = p
        if self.closed.is_set():
            raise SessionError("unavailable", "the connection has ended")
        self.send(dict(msg, req=req), fds=fds)
        if not p._started.wait(self.timeout):
            raise TimeoutError("no reply to exec")
        if p._err is not None:
            raise p._err
        if p.proc is None:
            raise SessionError("unavailable", "the connection ended before the process started")
        return p

    def wait(self, proc, timeout=None):
        """The exit of a process of the session, started by any connection."""
        rep = self.call({"op": "wait", "proc": proc}, timeout=timeout)
        return {k: v for k, v in rep.items() if k not in ("type", "req", "proc")}

    def state(self):
        return self.call({"op": "state"})["state"]

    def resolve(self, path, write=False):
        return self.call({"op": "resolve", "path": path, "write": write})["host_path"]

    def events(self, on_event, on=True):
        """Subscribes: on_event(event) is called from the reader thread."""
        return self.call({"op": "events", "on": on}, on_event=on_event if on else None)

    def signal(self, proc, sig, group=False):
        return self.call({"op": "signal", "proc": proc, "signal": str(sig), "group": group})

    def cancel(self, proc):
        return self.call({"op": "cancel", "proc": proc})

    def kill(self, sig="TERM"):
        return self.call({"op": "kill", "signal": str(sig)})

    def resize(self, proc, rows, cols):
        return self.call({"op": "resize", "proc": proc, "rows": rows, "cols": cols})

    def ping(self):
        return self.call({"op": "ping"})

    def delete(self, timeout=None):
        """Ends the session; the server closes the connection after the reply."""
        return self.call({"op": "delete"}, timeout=timeout)


# ---------------------------------------------------------------------------
# The program: steps against one session.


def write_new_file(path, data):
    """Creates path, refusing a symlink in its place (section 11)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read_file(path):
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        chunks = []
        while True:
            b = os.read(fd, 65536)
            if not b:
                return b"".join(chunks)
            chunks.append(b)
    finally:
        os.close(fd)


def exit_ok(ex):
    return ex is not None and ex.get("code") == 0 and not ex.get("error")


class Scenario:
    def __init__(self, opts):
        self.opts, self.conn, self.server = opts, None, None
        self.events, self.events_cv = [], threading.Condition()

    def _conn(self):
        if self.conn is None:
            self.conn = Connection.open(self.opts.id, self.opts.state_dir)
        return self.conn

    def _on_event(self, ev):
        with self.events_cv:
            self.events.append(ev)
            self.events_cv.notify_all()

    def _await_event(self, pred, timeout):
        with self.events_cv:
            self.events_cv.wait_for(lambda: any(pred(e) for e in self.events), timeout)
            return next((e for e in self.events if pred(e)), None)

    def step_hello(self):
        directory = self.opts.state_dir or state_dir()
        rec, path = find_session(self.opts.id, directory)
        c = self._conn()
        h = c.hello
        return {"ok": h.get("id") == self.opts.id and h.get("pid") == rec["init"]["pid"],
                "hello": h, "state_dir": directory, "record": path, "socket": rec["socket"]}

    def step_devserver(self):
        c = self._conn()
        p = c.exec(["python3", "-m", "http.server", str(self.opts.port), "--bind", "127.0.0.1"],
                   stdout="null", stderr="null", detach=True)
        self.server = p.proc
        # The server is detached: it outlives this connection; the steps
        # that follow use another one.
        c.close()
        c.closed.wait(5)
        self.conn = None
        return {"ok": True, "proc": p.proc, "pid": p.pid}

    def step_fetch(self):
        c = self._conn()
        code = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:%d/').status)" % self.opts.port
        last = None
        for attempt in range(1, 51):
            p = c.exec(["python3", "-c", code], timeout_ms=20000)
            ex = p.wait(30)
            last = {"exit": ex, "stdout": p.stdout.decode(errors="replace"),
                    "stderr": p.stderr.decode(errors="replace")[-300:]}
            if exit_ok(ex) and p.stdout == b"200\n":
                return dict(last, ok=True, attempts=attempt)
            time.sleep(0.2)
        return dict(last, ok=False, attempts=50)

    def step_state(self):
        st = self._conn().state()
        mine = [p for p in st["processes"] if p["proc"] == self.server]
        return {"ok": st["status"] == "running" and len(mine) == 1 and mine[0]["running"] and mine[0].get("detach") is True,
                "status": st["status"], "cwd": st["cwd"], "server": mine}

    def step_write(self):
        c = self._conn()
        host = c.resolve("/workspace/x", write=True)
        data = (self.opts.marker + "-host-to-sandbox").encode()
        write_new_file(host, data)
        p = c.exec(["cat", "/workspace/x"])
        ex = p.wait(30)
        return {"ok": exit_ok(ex) and p.stdout == data, "host_path": host, "exit": ex,
                "read": p.stdout.decode(errors="replace"), "stderr": p.stderr.decode(errors="replace")}

    def step_read(self):
        c = self._conn()
        data = self.opts.marker + "-sandbox-to-host"
        p = c.exec(["sh", "-c", 'printf %s "$1" > /workspace/y', "sh", data])
        ex = p.wait(30)
        host = c.resolve("/workspace/y")
        got = read_file(host)
        return {"ok": exit_ok(ex) and got == data.encode(), "host_path": host, "exit": ex,
                "read": got.decode(errors="replace"), "stderr": p.stderr.decode(errors="replace")}

    def step_violation(self):
        c = self._conn()
        c.events(self._on_event)
        p = c.exec(["unshare", "-U", "true"])
        ex = p.wait(30)
        ev = self._await_event(lambda e: e.get("kind") == "violation" and e.get("action") == "unshare", 10)
        return {"ok": ev is not None and ex.get("code") != 0, "event": ev, "exit": ex,
                "stderr": p.stderr.decode(errors="replace")}

    def step_fd(self):
        c = self._conn()
        r, w = os.pipe()
        try:
            data = self.opts.marker + "-through-a-descriptor"
            p = c.exec(["echo", data], stdout=w, stderr="null")
            os.close(w)
            w = -1
            out = b""
            while True:
                b = os.read(r, 65536)
                if not b:
                    break
                out += b
            ex = p.wait(30)
        finally:
            os.close(r)
            if w >= 0:
                os.close(w)
        return {"ok": exit_ok(ex) and out == (data + "\n").encode(), "exit": ex,
                "read": out.decode(errors="replace")}

    def step_tty(self):
        c = self._conn()
        p = c.exec(["sh", "-c", 'stty size; read l; echo "got:$l"'], stdin="pipe", tty=(30, 100), timeout_ms=20000)
        p.resize(31, 101)
        p.input(b"hi\n", eof=True)
        ex = p.wait(30)
        out = p.stdout.decode(errors="replace")
        # The size is read before or after the resize, whichever comes first.
        sized = "30 100\r\n" in out or "31 101\r\n" in out
        return {"ok": exit_ok(ex) and sized and "got:hi\r\n" in out, "exit": ex, "output": out}

    def step_stopserver(self):
        c = self._conn()
        c.cancel(self.server)
        ex = c.wait(self.server, timeout=30)
        return {"ok": ex.get("aborted") is True and ex.get("code") == 137, "exit": ex}

    def step_delete(self):
        c = self._conn()
        rec, record = find_session(self.opts.id, self.opts.state_dir)
        rep = c.delete(timeout=60)
        final = [e for e in self.events if e.get("kind") == "state"]
        eof = c.closed.wait(10)
        deadline = time.time() + 10
        while time.time() < deadline and (os.path.lexists(record) or os.path.lexists(rec["socket"])):
            time.sleep(0.05)
        left = [p for p in (record, rec["socket"]) if os.path.lexists(p)]
        subscribed = any(e.get("kind") == "violation" for e in self.events)
        return {"ok": rep.get("type") == "ok" and eof and not left and (not subscribed or final == [{"kind": "state", "status": "stopped"}]),
                "reply": rep, "final_state_events": final, "connection_ended": eof, "left": left}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--state-dir", help="the state directory (default: the user's, section 2.1)")
    ap.add_argument("--port", type=int, default=8000, help="the dev server's port in the session")
    ap.add_argument("--marker", default="m%d" % os.getpid(), help="a unique string for file contents")
    ap.add_argument("id")
    ap.add_argument("steps", nargs="+", help="hello devserver fetch state write read violation fd tty stopserver delete")
    opts = ap.parse_args(argv)
    sc = Scenario(opts)
    results, ok = {}, True
    for name in opts.steps:
        fn = getattr(sc, "step_" + name, None)
        if fn is None:
            results[name] = {"ok": False, "error": "no such step"}
        else:
            try:
                results[name] = fn()
            except Exception as e:  # reported, and the next steps still run
                results[name] = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
        ok = ok and results[name].get("ok") is True
    stray = sc.conn.stray_errors if sc.conn is not None else []
    print(json.dumps({"ok": ok, "steps": results, "stray_errors": stray}, sort_keys=True))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
