package netpolicy

import (
	"fmt"
	"io"
	"net"
	"testing"
)

// BenchmarkThroughput compares a 50 MB download from a local TCP server
// directly and through the proxy (CONNECT and SOCKS5). The goal
// is at least 80 % of the direct throughput.
func BenchmarkThroughput(b *testing.B) {
	e := newEnv(b, envOpts{})
	bigData()
	run := func(b *testing.B, open func() (net.Conn, io.Reader)) {
		b.SetBytes(bigSize)
		for b.Loop() {
			c, r := open()
			fmt.Fprintf(c, "GET %d\n", bigSize)
			n, err := io.Copy(io.Discard, r)
			c.Close()
			if err != nil || n != bigSize {
				b.Fatalf("got %d bytes, %v", n, err)
			}
		}
	}
	b.Run("direct", func(b *testing.B) {
		run(b, func() (net.Conn, io.Reader) {
			c, err := net.Dial("tcp", e.raw.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			return c, c
		})
	})
	b.Run("connect", func(b *testing.B) {
		run(b, func() (net.Conn, io.Reader) {
			c, br := e.connect(fmt.Sprintf("allowed.test:%d", e.rawPort))
			return c, br
		})
	})
	b.Run("socks5", func(b *testing.B) {
		run(b, func() (net.Conn, io.Reader) {
			c := e.socksOK(3, []byte("allowed.test"), e.rawPort)
			return c, c
		})
	})
}
