//go:build !linux

package main

import "io"

// sessionVerbs is empty: sessions need Linux.
var sessionVerbs = map[string]func(args []string, stdout, stderr io.Writer) int{}
