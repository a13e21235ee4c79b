package netpolicy

import (
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCurl runs curl itself against the proxy, as a sandboxed command
// would: HTTP forward, CONNECT and SOCKS5 with remote resolution.
func TestCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skipf("curl is not installed: %v", err)
	}
	e := newEnv(t, envOpts{})
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: e.tls.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		// -q first: no ~/.curlrc; a clean environment: no proxy
		// variables of the machine's own.
		cmd := exec.Command(curl, append([]string{"-q", "-sS", "--max-time", "60"}, args...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	httpProxy := "http://" + e.addr
	web := fmt.Sprintf("http://allowed.test:%d", e.webPort)
	tls := fmt.Sprintf("https://example.com:%d", e.tlsPort)

	for _, args := range [][]string{
		{"-x", httpProxy, web + "/hello"},
		{"-x", httpProxy, "--cacert", ca, tls + "/hello"},
		{"-x", httpProxy, "--proxytunnel", web + "/hello"},
		{"--socks5-hostname", e.addr, web + "/hello"},
		{"-x", "socks5h://" + e.addr, "--cacert", ca, tls + "/hello"},
	} {
		if out, err := run(args...); err != nil || out != "hello" {
			t.Errorf("curl %q = %q, %v", args, out, err)
		}
	}
	e.noRefusals()

	if !testing.Short() {
		want := sum(bigData())
		for i, args := range [][]string{
			{"-x", httpProxy, web + "/big"},
			{"-x", httpProxy, "--cacert", ca, tls + "/big"},
			{"--socks5-hostname", e.addr, web + "/bigchunked"},
		} {
			file := filepath.Join(dir, fmt.Sprint("big", i))
			if out, err := run(append(args, "-o", file)...); err != nil {
				t.Errorf("curl %q: %v\n%s", args, err, out)
				continue
			}
			b, err := os.ReadFile(file)
			if err != nil || sum(b) != want {
				t.Errorf("curl %q: %d bytes, not byte-exact (%v)", args, len(b), err)
			}
			os.Remove(file)
		}
	}

	for _, tt := range []struct {
		args   []string
		proto  string
		host   string
		port   int
		output string // part of curl's output
	}{
		{[]string{"-x", httpProxy, "http://denied.test/"}, ProtoHTTP, "denied.test", 80, "not in the allow list"},
		{[]string{"-x", httpProxy, "https://denied.test/"}, ProtoConnect, "denied.test", 443, "403"},
		{[]string{"-x", httpProxy, "http://2130706433/"}, ProtoHTTP, "127.0.0.1", 80, "loopback"},
		{[]string{"-x", httpProxy, fmt.Sprintf("http://private.test:%d/", e.webPort)}, ProtoHTTP, "private.test", e.webPort, "private address 10.0.0.5"},
		{[]string{"--socks5-hostname", e.addr, "http://denied.test/"}, ProtoSOCKS5, "denied.test", 80, ""},
		{[]string{"--socks5-hostname", e.addr, "http://169.254.169.254/"}, ProtoSOCKS5, "169.254.169.254", 80, ""},
		{[]string{"-x", httpProxy, "--proxytunnel", fmt.Sprintf("http://127.0.0.1:%d/", e.port)}, ProtoConnect, "127.0.0.1", e.port, "403"},
	} {
		out, err := run(tt.args...)
		if tt.output != "" && !strings.Contains(out, tt.output) {
			t.Errorf("curl %q = %q, %v; want output naming %q", tt.args, out, err, tt.output)
		}
		if strings.Contains(out, "hello") {
			t.Errorf("curl %q reached something: %q", tt.args, out)
		}
		e.wantRefusal(tt.proto, tt.host, tt.port, "", "-")
	}
}
