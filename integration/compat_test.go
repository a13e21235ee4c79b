//go:build linux

package integration

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestInt80Entry: the i386 system-call entry cannot be used to get around
// the filter (whose rules are written for x86_64 numbers): the process is
// killed by SIGSYS before the call runs.
func TestInt80Entry(t *testing.T) {
	t.Parallel()
	if runtime.GOARCH != "amd64" {
		t.Skipf("int 0x80 exists on amd64 only (this is %s)", runtime.GOARCH)
	}
	r := attack(t, newWorkspace(t), nil, "int80")
	if v, detail := r.verdict(); v == "ESCAPED" {
		t.Fatalf("SANDBOX ESCAPE: %s\n%s", detail, r)
	}
	if r.code != 128+31 {
		t.Fatalf("want death by SIGSYS (exit 159), got exit %d\n%s", r.code, r)
	}
}

// TestCompilersRun: everyday toolchains work under the default profile in a
// real sandbox (positive control for seccomp and the mount layout).
func TestCompilersRun(t *testing.T) {
	t.Parallel()
	t.Run("cc", func(t *testing.T) {
		t.Parallel()
		if _, err := os.Stat("/usr/bin/cc"); err != nil {
			t.Skip("no C compiler on this host (make setup installs build-essential)")
		}
		script := `printf '#include <stdio.h>\nint main(void){puts("cc ok");return 0;}\n' > h.c && cc -o h h.c && ./h`
		if r := spawn(t, spawnCfg{ws: newWorkspace(t)}, "/bin/sh", "-c", script); r.code != 0 || !strings.Contains(r.stdout, "cc ok") {
			t.Fatalf("cc hello world failed\n%s", r)
		}
	})
	t.Run("go build", func(t *testing.T) {
		t.Parallel()
		goBin := "/usr/local/go/bin/go"
		if _, err := os.Stat(goBin); err != nil {
			t.Skip("no Go toolchain at /usr/local/go (the CI machines have one)")
		}
		script := `mkdir m && cd m && printf 'module m\ngo 1.21\n' > go.mod && ` +
			`printf 'package main\nimport "fmt"\nfunc main(){ fmt.Println("go ok") }\n' > main.go && ` +
			goBin + ` build -o app . && ./app`
		r := spawn(t, spawnCfg{ws: newWorkspace(t), flags: []string{"--env", "GOTOOLCHAIN=local", "--env", "GOFLAGS=-mod=mod", "--env", "GOPROXY=off"}, guard: 5 * time.Minute}, "/bin/sh", "-c", script)
		if r.code != 0 || !strings.Contains(r.stdout, "go ok") {
			t.Fatalf("go build failed\n%s", r)
		}
	})
}

// TestPlantedFIFODoesNotStall: a FIFO left in the workspace where a later
// spawn mounts a file must not block that spawn's setup (opening a FIFO for
// reading waits for a writer).
func TestPlantedFIFODoesNotStall(t *testing.T) {
	t.Parallel()
	ws := newWorkspace(t)
	if err := unix.Mkfifo(ws+"/planted", 0o644); err != nil {
		t.Fatal(err)
	}
	// The source lives beside the workspace (same filesystem, so root mode
	// can idmap it: tmpfs cannot before Linux 6.3).
	src := tempDir(t) + "/content"
	writeFile(t, src, "bound over the fifo\n", 0o644)
	r := spawn(t, spawnCfg{ws: ws, flags: []string{"--ro", src + ":/workspace/planted"}, guard: 30 * time.Second}, "/bin/cat", "/workspace/planted")
	if r.code != 0 || r.stdout != "bound over the fifo\n" {
		t.Fatalf("the bind over the planted FIFO must work\n%s", r)
	}
}
