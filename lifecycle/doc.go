// Package lifecycle owns a sandbox on Linux as an object whose life is
// longer than one call: Create builds it (namespaces, root, cgroup, the
// init waiting for its release), Start runs its command, Signal and Kill
// reach it, Wait reports how it ended and Delete removes everything it
// held (the init, the cgroup, the root template's lock, the state record).
// A sandbox made with an ID has a small state record under the caller's
// state directory, so that another process finds it by that ID (Load,
// List) and can signal it; Sweep removes the records of owners that died
// and ends what they left. A one-shot spawn (agentrun.Run) is an
// anonymous sandbox: created, started, waited for and deleted, with no
// record. A serving sandbox (Options.Serve) has no command of its own: it
// runs a process per Exec, each as confined as a command, until deleted.
//
// It sits between a compiled OCI Spec and nsinit, which starts the C init:
// Policy or bundle -> specs.Spec -> lifecycle -> nsinit -> the C init.
package lifecycle
