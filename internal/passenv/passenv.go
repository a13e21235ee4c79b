// Package passenv names the caller's environment variables that reach a
// sandboxed command. It is its own package so that the prestart
// constructor's copy of the list (cmd/agentrun/internal/fastpath/prestart.c) can be
// tested against it.
package passenv

// Names are the caller variables that reach the command; everything else
// (tokens, SSH_AUTH_SOCK, cloud credentials) is dropped.
var Names = [...]string{"PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TERM", "COLORTERM", "NO_COLOR", "TZ"}
