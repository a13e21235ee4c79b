//go:build linux && cgo

package nsinit

import (
	"errors"
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

// countedHolder is the C side's idmap holder, counting the holders
// started and released; each release (after the reap) is delayed by delay.
func countedHolder(started, released *atomic.Int64, delay time.Duration) func(pipeRead int) (int, func(), error) {
	return func(pipeRead int) (int, func(), error) {
		pid, reaped, err := cinit.UsernsHolder(pipeRead)
		if err != nil {
			return pid, reaped, err
		}
		started.Add(1)
		return pid, func() { time.Sleep(delay); reaped(); released.Add(1) }, nil
	}
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
	holder := countedHolder(&started, &released, 0)
	var wg, reaping sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < cap(errs); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fd, err := usernsVia(holder, maps(uid), maps(gid), &reaping)
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
	// Every holder is reaped once reaping says so, not just eventually:
	// a spawn's Wait and a failed Start rely on it.
	reaping.Wait()
	if kids := childrenOf(os.Getpid()); len(kids) > 0 || released.Load() != started.Load() {
		t.Fatalf("holders left behind: children %v; %d of %d stacks released", kids, released.Load(), started.Load())
	}
	if started.Load() != int64(cap(errs)) {
		t.Fatalf("%d holders started, want %d", started.Load(), cap(errs))
	}
}

// TestHoldersReapedByStartAndWait: a Start that fails after its idmap holders
// were started (here at the cgroup placement, the step after the idmapped
// trees) has reaped them by the time it returns. Its caller, the CLI, exits
// at once; a holder still dying or unreaped then would be left to the
// host's reaper, which in a container whose PID 1 is an agent runner may
// never reap. Likewise, a started sandbox's Wait returns only once its
// holders are reaped. The test's holder is the C one, whose release (after
// the reap) takes a while longer, so that a Start or Wait that did not wait
// for it would return first.
func TestHoldersReapedByStartAndWait(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: only host root idmaps a bind of the host's filesystem")
	}
	skipWithoutUserns(t)
	var started, released atomic.Int64
	holder := countedHolder(&started, &released, 50*time.Millisecond)
	refused := errors.New("placement refused by the test")
	spec := testSpec(t, "/bin/true")
	for _, d := range []string{"/data", "/more"} { // two maps, two holders
		m := specs.Mount{Destination: d, Type: "bind", Source: t.TempDir(), Options: []string{"rbind", "idmap"},
			UIDMappings: []specs.LinuxIDMapping{{ContainerID: 1000, HostID: 2147418112, Size: 1}},
			GIDMappings: []specs.LinuxIDMapping{{ContainerID: 1000, HostID: 2147418112, Size: 1}},
		}
		if d == "/more" {
			m.UIDMappings[0].ContainerID = 1001
		}
		spec.Mounts = append(spec.Mounts, m)
	}
	_, err := Start(&Config{Spec: spec, usernsHolder: holder,
		CgroupReady: func() (*CgroupPlacement, error) { return nil, refused }})
	if !errors.Is(err, refused) {
		t.Fatalf("Start: %v, want the test's placement error", err)
	}
	if kids := childrenOf(os.Getpid()); len(kids) > 0 || started.Load() != 2 || released.Load() != 2 {
		t.Fatalf("Start failed with children %v left; %d holders started, %d released, want 2 and 2", kids, started.Load(), released.Load())
	}
	p, err := Start(&Config{Spec: spec, usernsHolder: holder})
	if err != nil {
		t.Fatal(err)
	}
	if exit, err := p.Wait(); err != nil || exit.Code != 0 {
		t.Fatalf("the sandbox without the placement error: exit %+v, %v", exit, err)
	}
	if kids := childrenOf(os.Getpid()); len(kids) > 0 || started.Load() != 4 || released.Load() != 4 {
		t.Fatalf("Wait returned with children %v left; %d holders started, %d released, want 4 and 4", kids, started.Load(), released.Load())
	}
}
