//go:build linux

package integration

import (
	"net"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
)

// banner serves connections on l, writing msg to each and counting them.
func banner(t *testing.T, l net.Listener, msg string) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			_, _ = c.Write([]byte(msg))
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return &n
}

// TestHostLoopbackTCP: with the default --net none, a service listening on
// the host's 127.0.0.1 is unreachable; with --net host it is reachable.
func TestHostLoopbackTCP(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	msg := token("agentrun-tcp-banner-")
	accepted := banner(t, l, msg)
	addr := l.Addr().String()

	mustBlock(t, attack(t, ws, nil, "tcp", addr), "connect to host "+addr+" (default network)")
	mustBlock(t, attack(t, ws, []string{"--net", "none"}, "tcp", addr), "connect to host "+addr+" (--net none)")
	if n := accepted.Load(); n != 0 {
		t.Errorf("SANDBOX ESCAPE: the host listener accepted %d connection(s) from a --net none sandbox", n)
	}
	d := mustSucceed(t, attack(t, ws, []string{"--net", "host"}, "tcp", addr), "connect to host "+addr+" with --net host")
	if !strings.Contains(d, msg) {
		t.Errorf("--net host reached something else than the test listener: %s", d)
	}

	// The IPv6 loopback, where the host has one.
	if l6, err := net.Listen("tcp", "[::1]:0"); err == nil {
		accepted6 := banner(t, l6, msg)
		mustBlock(t, attack(t, ws, nil, "tcp", l6.Addr().String()), "connect to host "+l6.Addr().String())
		if n := accepted6.Load(); n != 0 {
			t.Errorf("SANDBOX ESCAPE: the host's [::1] listener accepted %d connection(s)", n)
		}
	}

	// Other ways out: a public address, and the host's addresses.
	mustBlock(t, attack(t, ws, nil, "tcp", "1.1.1.1:443"), "connect to 1.1.1.1:443")
	mustBlock(t, attack(t, ws, nil, "netifs"), "non-loopback interfaces under --net none")
	if ip := hostNonLoopbackIP(); ip != "" {
		mustBlock(t, attack(t, ws, nil, "tcp", net.JoinHostPort(ip, "22")), "connect to the host's own address "+ip)
	}
	t.Run("control: loopback inside works", func(t *testing.T) {
		if _, err := exec.LookPath("python3"); err != nil {
			t.Skip("no python3 on the host")
		}
		r := sh(t, ws, nil, `python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); c=socket.create_connection(s.getsockname()); print("LOOPBACK-OK")'`)
		if !strings.Contains(r.stdout, "LOOPBACK-OK") {
			t.Errorf("loopback inside a --net none sandbox does not work\n%s", r)
		}
	})
}

func hostNonLoopbackIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
	}
	return ""
}

// TestHostAbstractUnixSocket: abstract unix sockets belong to the network
// namespace; a host listener must be unreachable under --net none.
func TestHostAbstractUnixSocket(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	name := token("agentrun-abstract-")
	l, err := net.Listen("unix", "@"+name)
	if err != nil {
		t.Fatal(err)
	}
	msg := token("agentrun-unix-banner-")
	accepted := banner(t, l, msg)

	mustBlock(t, attack(t, ws, nil, "unix", "@"+name), "connect to host abstract socket @"+name)
	if n := accepted.Load(); n != 0 {
		t.Errorf("SANDBOX ESCAPE: the host abstract socket accepted %d connection(s) from a --net none sandbox", n)
	}
	d := mustSucceed(t, attack(t, ws, []string{"--net", "host"}, "unix", "@"+name), "connect to @"+name+" with --net host")
	if !strings.Contains(d, msg) {
		t.Errorf("--net host reached something else than the test listener: %s", d)
	}
}

// TestDNSBlocked: no name resolution with --net none.
func TestDNSBlocked(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	mustBlock(t, attack(t, ws, nil, "dns", "example.com"), "DNS query to the resolv.conf nameserver")
	t.Run("getent", func(t *testing.T) {
		if _, err := exec.LookPath("getent"); err != nil {
			t.Skip("no getent on the host")
		}
		r := sh(t, ws, nil, "getent hosts example.com")
		if r.code == 0 {
			t.Errorf("SANDBOX ESCAPE: getent resolved example.com under --net none\n%s", r)
		}
		// Positive control: local resolution still works.
		r = sh(t, ws, nil, "getent hosts localhost")
		mustExit(t, r, 0, "getent hosts localhost (from /etc/hosts)")
	})
	t.Run("control: --net host resolves", func(t *testing.T) {
		host, _ := exec.Command(attackerBin, "dns", "example.com").Output()
		if !strings.HasPrefix(string(host), "ESCAPED") {
			t.Skipf("the host itself gets no DNS answer (%s), so --net host cannot either", strings.TrimSpace(string(host)))
		}
		mustSucceed(t, attack(t, ws, []string{"--net", "host"}, "dns", "example.com"), "DNS with --net host")
	})
}
