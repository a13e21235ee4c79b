//go:build !linux

// Command spawnbench measures sandbox spawn latency. It needs Linux: the
// contenders are Linux namespace tools.
package main

import (
	"fmt"
	"os"
	"runtime"
)

func main() {
	fmt.Fprintf(os.Stderr, "spawnbench: unsupported on %s (the contenders are Linux namespace sandboxes)\n", runtime.GOOS)
	os.Exit(2)
}
