// Package darwin is the macOS backend of agentrun: it turns a sandbox request
// into a Seatbelt profile (SBPL) and runs the command through
// /usr/bin/sandbox-exec.
//
// The package owns four things:
//
//   - Profile generation (Compile): a pure function from a Spec to SBPL text
//     plus the -D parameters it references. Every host path enters the
//     profile as a parameter, so the text itself never embeds a user path
//     and needs no path escaping. Path canonicalization is injected as a
//     Resolver so tests stub it and the generator never touches the disk.
//   - The structural checker (Check) that every generated profile passes
//     before it is used: balanced parentheses, well-formed strings, size
//     limits of the SBPL interpreter, defined parameters, and rules that
//     must never appear (a local-address filter on an outbound rule).
//   - The launcher: argument and environment construction (Args, Environ),
//     the stderr filter that hides sandbox-exec's own chatter and spots its
//     failures, exit-status classification, and process supervision
//     (timeout, signal forwarding, process-group cleanup). Only Exec, which
//     actually starts sandbox-exec, and the few helpers that read macOS
//     device numbering are built for darwin alone.
//   - Violation collection: a `log stream` filtered on the run's message tag,
//     parsed into Denials. Where the stream cannot be started (no log(1),
//     not an admin user), the collector reports why instead of an empty list.
//
// The package does not import the module root; the root's run_darwin.go
// translates a Policy into a Spec and a darwin Outcome back into a Result.
//
// Known gaps compared with the Linux backend, by design of Seatbelt: there is
// no path remapping (a mount is visible at its host path, not at its
// destination, and the workspace stays at its real path rather than
// /workspace), no private tmpfs, no private loopback (network "none" denies
// all IP traffic, loopback included), no resource limits, and processes that
// leave the command's process group (setsid daemons) are not killed at the
// end of the run.
//
// Written and tested on Linux only; these assumptions still need a run on a
// Mac: that (subpath (param "K")) with -D K=V behaves as the generator
// expects; whether file-test-existence needs a rule of its own; the exact
// text of sandbox-exec's deprecation banner that the stderr filter hides;
// whether "--" ends sandbox-exec's options; the ndjson shape of denial
// events from `log stream`; and the compiled-profile size limit, which
// Check estimates with a margin rather than measures.
package darwin
