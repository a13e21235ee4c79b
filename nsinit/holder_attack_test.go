//go:build linux && cgo

package nsinit

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun/agentrun/nsinit/internal/cinit"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// childrenOf lists the pids whose parent is ppid, with their state.
func childrenOf(ppid int) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) {
			out = append(out, e.Name()+":"+f[0])
		}
	}
	return out
}

// TestUsernsHolders: the C side's idmap holders (CLONE_VM, on a stack of
// their own) give a user namespace with the requested maps, and are all
// killed and reaped, their stacks released, even when many are made at
// once while the Go heap churns. Releases are counted through the holder's
// own release function: counting 64 KiB mappings in /proc/self/maps was
// unreliable, as the kernel merges and splits neighbouring anonymous
// mappings.
func TestUsernsHolders(t *testing.T) {
	uid, gid := os.Geteuid(), os.Getegid()
	maps := func(id int) []specs.LinuxIDMapping {
		return []specs.LinuxIDMapping{{ContainerID: 0, HostID: uint32(id), Size: 1}}
	}
	if _, err := cUserns(maps(uid), maps(gid)); err != nil {
		t.Skipf("no user namespaces here: %v", err)
	}
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Add(1)
	go func() { // heap and stack churn next to the shared address space
		defer churn.Done()
		var keep [][]byte
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			keep = append(keep, make([]byte, 4096))
			if len(keep) > 1000 {
				keep = nil
				runtime.GC()
			}
		}
	}()
	var started, released atomic.Int64
	holder := func(pipeRead int) (int, func(), error) {
		pid, reaped, err := cinit.UsernsHolder(pipeRead)
		if err != nil {
			return pid, reaped, err
		}
		started.Add(1)
		return pid, func() { reaped(); released.Add(1) }, nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < cap(errs); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fd, err := usernsVia(holder, maps(uid), maps(gid))
			if err != nil {
				errs <- err
				return
			}
			defer unix.Close(fd)
			// The namespace's owner is this user, and the fd is a user
			// namespace (NS_GET_OWNER_UID works only on those).
			owner, err := unix.IoctlGetUint32(fd, unix.NS_GET_OWNER_UID)
			if err != nil || int(owner) != uid {
				errs <- fmt.Errorf("holder namespace: owner %d, %v", owner, err)
			}
		}()
	}
	wg.Wait()
	close(stop)
	churn.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		kids := childrenOf(os.Getpid())
		if len(kids) == 0 && released.Load() == started.Load() {
			if started.Load() != int64(cap(errs)) {
				t.Fatalf("%d holders started, want %d", started.Load(), cap(errs))
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("holders left behind: children %v; %d of %d stacks released", kids, released.Load(), started.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
