package sdbus_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/sdbus"
	"github.com/agentrun/agentrun/internal/sdbus/sdbustest"
)

// TestConnConcurrent: one connection, many goroutines, each with its own
// calls and its own jobs; every reply and every job's end reaches the
// goroutine it belongs to.
func TestConnConcurrent(t *testing.T) {
	dir := t.TempDir()
	fake := &sdbustest.Manager{ControlGroup: "/user.slice/user-1.slice/user@1.service"}
	fake.ServeUserManager(t, dir)
	m := dial(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := m.Subscribe(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				if cg, err := m.ControlGroup(ctx); err != nil || cg != fake.ControlGroup {
					errs <- fmt.Errorf("ControlGroup: %q, %v", cg, err)
					return
				}
				unit := fmt.Sprintf("agentrun-%d-%d.scope", g, i)
				job, err := m.StartTransientUnit(ctx, unit, "fail", nil)
				if err != nil {
					errs <- err
					return
				}
				if res, err := m.WaitJob(ctx, job); err != nil || res != "done" {
					errs <- fmt.Errorf("%s: job %q, %v", unit, res, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func newClient(t *testing.T, fake *sdbustest.Manager, timeout time.Duration) *sdbus.Client {
	t.Helper()
	dir := t.TempDir()
	fake.ServeUserManager(t, dir)
	eps := sdbus.UserManagerEndpoints(func(k string) string {
		if k == "XDG_RUNTIME_DIR" {
			return dir
		}
		return ""
	}, os.Geteuid())
	c := sdbus.NewClient(eps, os.Geteuid(), timeout)
	sdbus.SetIdleClose(c, time.Minute) // the tests count connections
	t.Cleanup(func() { c.Close() })
	return c
}

func count(fake *sdbustest.Manager, member string) int {
	n := 0
	for _, c := range fake.Calls() {
		if c.Member == member {
			n++
		}
	}
	return n
}

// firstFault makes the first call with member meet f.
func firstFault(member string, f sdbustest.Fault) func(sdbustest.Call, int) sdbustest.Fault {
	return func(c sdbustest.Call, n int) sdbustest.Fault {
		if c.Member == member && n == 1 {
			return f
		}
		return sdbustest.Answer
	}
}

// TestClientSlowManager: requests from many goroutines queue for a slow
// manager; each gets its own time limit once sent, so all succeed though
// together they take longer than one limit, over one connection.
func TestClientSlowManager(t *testing.T) {
	const latency, timeout = 50 * time.Millisecond, 300 * time.Millisecond
	fake := &sdbustest.Manager{Latency: latency, OnAttach: func(sdbustest.Call) *sdbus.Error { return nil }}
	c := newClient(t, fake, timeout)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	began := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				if err := c.AttachProcessesToUnit(ctx, fmt.Sprintf("agentrun-%d.scope", g), "/x", []uint32{1}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if d := time.Since(began); d < timeout {
		t.Errorf("took %v: the test needs a load above one request's limit", d)
	}
	if n := fake.Dialed(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
	if n := count(fake, "AttachProcessesToUnit"); n != 24 {
		t.Errorf("%d AttachProcessesToUnit calls, want 24 (none repeated)", n)
	}
}

// TestClientReconnects: a connection the manager closes is replaced, and
// the request it took with it is made again.
func TestClientReconnects(t *testing.T) {
	fake := &sdbustest.Manager{
		OnAttach: func(sdbustest.Call) *sdbus.Error { return nil },
		Faults:   firstFault("AttachProcessesToUnit", sdbustest.Hangup),
	}
	c := newClient(t, fake, time.Second)
	if err := c.AttachProcessesToUnit(context.Background(), "agentrun-x.scope", "/x", []uint32{1}); err != nil {
		t.Fatal(err)
	}
	if n := fake.Dialed(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
	if n := count(fake, "Subscribe"); n != 2 {
		t.Errorf("%d Subscribe calls, want one per connection", n)
	}
}

// TestClientRetriesRead: a read the manager never answers is made again
// after the request's time limit; its answer is kept for the connection.
func TestClientRetriesRead(t *testing.T) {
	const timeout = 200 * time.Millisecond
	fake := &sdbustest.Manager{ControlGroup: "/u", Faults: firstFault("Get", sdbustest.Lose)}
	c := newClient(t, fake, timeout)
	began := time.Now()
	for range 2 {
		if cg, err := c.ControlGroup(context.Background()); err != nil || cg != "/u" {
			t.Fatalf("ControlGroup: %q, %v", cg, err)
		}
	}
	if d := time.Since(began); d < timeout {
		t.Errorf("answered in %v, before the lost request's limit", d)
	}
	if n := count(fake, "Get"); n != 2 {
		t.Errorf("%d Get calls, want 2 (one lost, one answered and kept)", n)
	}
}

// TestClientStart: StartTransientUnit made again only when the unit does
// not exist, and the unit's state used when an answer or the job's end
// was lost.
func TestClientStart(t *testing.T) {
	cases := []struct {
		name   string
		fake   *sdbustest.Manager
		result string
		err    error
		starts int
	}{
		{"answered", &sdbustest.Manager{}, "done", nil, 1},
		{"lost", &sdbustest.Manager{Faults: firstFault("StartTransientUnit", sdbustest.Lose)}, "done", nil, 2},
		{"hangup", &sdbustest.Manager{Faults: firstFault("StartTransientUnit", sdbustest.Hangup)}, "done", nil, 2},
		{"answer lost", &sdbustest.Manager{Faults: firstFault("StartTransientUnit", sdbustest.Mute)}, "done", nil, 1},
		{"job's end lost", &sdbustest.Manager{Faults: firstFault("StartTransientUnit", sdbustest.AnswerHangup)}, "done", nil, 1},
		{"job failed", &sdbustest.Manager{OnStart: func(sdbustest.Call) (string, *sdbus.Error) { return "failed", nil }}, "failed", nil, 1},
		{"refused", &sdbustest.Manager{OnStart: func(sdbustest.Call) (string, *sdbus.Error) {
			return "", &sdbus.Error{Name: "org.freedesktop.DBus.Error.AccessDenied"}
		}}, "", &sdbus.Error{}, 1},
		{"never answers", &sdbustest.Manager{Hang: true}, "", context.DeadlineExceeded, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake := tc.fake
			c := newClient(t, fake, 200*time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			res, err := c.StartTransientUnit(ctx, "agentrun-x.scope", nil)
			switch want := tc.err.(type) {
			case nil:
				if err != nil {
					t.Fatal(err)
				}
			case *sdbus.Error:
				if !errors.As(err, &want) {
					t.Fatalf("got %v, want an error reply", err)
				}
			default:
				if !errors.Is(err, want) {
					t.Fatalf("got %v, want %v", err, want)
				}
			}
			if res != tc.result {
				t.Errorf("result %q, want %q", res, tc.result)
			}
			if n := count(fake, "StartTransientUnit"); n != tc.starts {
				t.Errorf("%d StartTransientUnit calls, want %d", n, tc.starts)
			}
		})
	}
}

// TestClientStop: a unit not loaded is stopped; a stop whose answer was
// lost is asked again; a failed job is an error.
func TestClientStop(t *testing.T) {
	ctx := context.Background()
	t.Run("answer lost", func(t *testing.T) {
		fake := &sdbustest.Manager{Faults: firstFault("StopUnit", sdbustest.Mute)}
		c := newClient(t, fake, 200*time.Millisecond)
		if err := c.StopUnit(ctx, "agentrun-x.scope"); err != nil {
			t.Fatal(err)
		}
		if n := count(fake, "StopUnit"); n != 2 {
			t.Errorf("%d StopUnit calls, want 2", n)
		}
	})
	t.Run("not loaded", func(t *testing.T) {
		fake := &sdbustest.Manager{OnStop: func(c sdbustest.Call) (string, *sdbus.Error) {
			return "", &sdbus.Error{Name: sdbus.ErrNoSuchUnit}
		}}
		if err := newClient(t, fake, time.Second).StopUnit(ctx, "agentrun-x.scope"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("job failed", func(t *testing.T) {
		fake := &sdbustest.Manager{OnStop: func(c sdbustest.Call) (string, *sdbus.Error) { return "failed", nil }}
		if err := newClient(t, fake, time.Second).StopUnit(ctx, "agentrun-x.scope"); err == nil {
			t.Fatal("no error for a failed stop job")
		}
	})
}

// TestClientBus: through a bus daemon, Hello and AddMatch come once per
// connection, before anything else.
func TestClientBus(t *testing.T) {
	fake := &sdbustest.Manager{Bus: true, ControlGroup: "/u"}
	c := newClient(t, fake, time.Second)
	ctx := context.Background()
	if _, err := c.ControlGroup(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := c.StartTransientUnit(ctx, "agentrun-x.scope", nil); err != nil || res != "done" {
		t.Fatalf("start: %q, %v", res, err)
	}
	if err := c.StopUnit(ctx, "agentrun-x.scope"); err != nil {
		t.Fatal(err)
	}
	var members []string
	for _, call := range fake.Calls() {
		members = append(members, call.Member)
	}
	want := []string{"Hello", "AddMatch", "Subscribe", "Get", "StartTransientUnit", "StopUnit"}
	if !reflect.DeepEqual(members, want) {
		t.Errorf("calls %v, want %v", members, want)
	}
}

// TestClientIdleClose: the connection closes once unused for a while and
// opens again on the next request.
func TestClientIdleClose(t *testing.T) {
	fake := &sdbustest.Manager{ControlGroup: "/u"}
	c := newClient(t, fake, time.Second)
	sdbus.SetIdleClose(c, 50*time.Millisecond)
	ctx := context.Background()
	if _, err := c.ControlGroup(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for fake.Open() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := fake.Open(); n != 0 {
		t.Fatalf("%d connections still open", n)
	}
	if _, err := c.ControlGroup(ctx); err != nil {
		t.Fatal(err)
	}
	if n := fake.Dialed(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

// TestFirstMessageHeld: a server that leaves a new connection's first
// message unread until more data arrives (systemd's sd-bus, at times)
// costs a new connection a pause, not its first request's time limit.
func TestFirstMessageHeld(t *testing.T) {
	const timeout = 3 * time.Second
	fake := &sdbustest.Manager{ControlGroup: "/u", HoldFirst: true}
	c := newClient(t, fake, timeout)
	began := time.Now()
	if cg, err := c.ControlGroup(context.Background()); err != nil || cg != "/u" {
		t.Fatalf("ControlGroup: %q, %v", cg, err)
	}
	if d := time.Since(began); d > timeout/2 {
		t.Errorf("answered after %v", d)
	}
	if n := fake.Dialed(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
	if n := fake.Pings(); n < 2 {
		t.Errorf("%d pings: the held one and at least one more", n)
	}
}
