// Package netpolicy owns agentrun's allow-list network mode as a library,
// independent of sandboxes: what a sandbox may connect to, and the proxy
// that connects for it.
//
// It holds today:
//
//   - the allow list: ParseAllow reads --allow-net / allow_net entries
//     (names, *.wildcards, IP literals and CIDR ranges, each with a port
//     or the default 80 and 443) into an immutable Policy;
//   - host canonicalisation: CanonicalHost refuses bytes no host name may
//     hold (NUL included) and reads IP literals in every spelling a C
//     client would connect to (inet_aton's decimal, octal, hex and short
//     forms, IPv4-mapped IPv6), so that a literal is judged as the address
//     it is;
//   - the SSRF guard: Classify names the class of an address (loopback,
//     private, link-local, CGNAT, unique-local, metadata...; NAT64, 6to4
//     and Teredo by the IPv4 address they embed), and Policy.Decide and
//     Policy.Check refuse a special address unless an IP entry lifts it,
//     refuse a name if any of its addresses is special, and return the
//     exact addresses to connect to;
//   - the proxy: Proxy serves HTTP (CONNECT and absolute-form requests)
//     and SOCKS5 (CONNECT, with remote resolution) on the same listener,
//     told apart by the first byte, resolves names itself, connects only
//     to the address it checked and reports every refusal to OnRefuse
//     as a Refusal that maps onto an agentrun violation. Tunnel serves a
//     connection whose destination the caller already knows.
//
// What it does not do yet belongs to the sandbox wiring: creating the
// listeners inside a sandbox's network namespace (Serve takes any
// net.Listener, for example one from net.FileListener on a socket passed
// out over SCM_RIGHTS), the DNS stub and synthetic addresses for programs
// that ignore proxy variables (Policy.AllowsName and Proxy.Tunnel are the
// pieces it needs), the proxy environment variables, the CLI flags and
// the links.
//
// The package is pure Go and builds on every GOOS.
package netpolicy
