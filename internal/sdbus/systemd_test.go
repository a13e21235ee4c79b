package sdbus_test

import (
	"context"
	"errors"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/sdbus"
	"github.com/agentrun/agentrun/internal/sdbus/sdbustest"
)

func TestUserManagerEndpoints(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	cases := []struct {
		env  map[string]string
		want []sdbus.Endpoint
	}{
		{map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000"}, []sdbus.Endpoint{
			{Path: "/run/user/1000/systemd/private"}, {Path: "/run/user/1000/bus", Bus: true}}},
		{map[string]string{}, []sdbus.Endpoint{
			{Path: "/run/user/7/systemd/private"}, {Path: "/run/user/7/bus", Bus: true}}},
		{map[string]string{"XDG_RUNTIME_DIR": "/x", "DBUS_SESSION_BUS_ADDRESS": "unix:abstract=/tmp/a,guid=1;unix:path=/s/b%20c,guid=2;tcp:host=h"},
			[]sdbus.Endpoint{{Path: "/x/systemd/private"}, {Path: "/s/b c", Bus: true}}},
	}
	for _, tc := range cases {
		if got := sdbus.UserManagerEndpoints(env(tc.env), 7); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v: got %v, want %v", tc.env, got, tc.want)
		}
	}
}

func dial(t *testing.T, dir string) *sdbus.Manager {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	eps := sdbus.UserManagerEndpoints(func(k string) string {
		if k == "XDG_RUNTIME_DIR" {
			return dir
		}
		return ""
	}, os.Geteuid())
	m, err := sdbus.DialManager(ctx, eps, os.Geteuid())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestFakeManager drives the client through a scope's life against the
// fake, peer-to-peer (systemd's private socket) and through a bus daemon.
func TestFakeManager(t *testing.T) {
	for _, bus := range []bool{false, true} {
		name := "private socket"
		if bus {
			name = "bus"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			fake := &sdbustest.Manager{Bus: bus, ControlGroup: "/user.slice/user-1.slice/user@1.service"}
			fake.ServeUserManager(t, dir)
			m := dial(t, dir)
			if got := m.Endpoint().Bus; got != bus {
				t.Fatalf("reached through bus=%v", got)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			cg, err := m.ControlGroup(ctx)
			if err != nil || cg != fake.ControlGroup {
				t.Fatalf("ControlGroup: %q, %v", cg, err)
			}
			if err := m.Subscribe(ctx); err != nil {
				t.Fatal(err)
			}
			job, err := m.StartTransientUnit(ctx, "agentrun-x.scope", "fail", []sdbus.Property{
				{Name: "PIDs", Value: sdbus.Variant{Sig: "au", Value: []uint32{42}}},
				{Name: "Delegate", Value: sdbus.Variant{Sig: "b", Value: true}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if res, err := m.WaitJob(ctx, job); err != nil || res != "done" {
				t.Fatalf("WaitJob: %q, %v", res, err)
			}
			job, err = m.StopUnit(ctx, "agentrun-x.scope", "replace")
			if err != nil {
				t.Fatal(err)
			}
			if res, err := m.WaitJob(ctx, job); err != nil || res != "done" {
				t.Fatalf("WaitJob stop: %q, %v", res, err)
			}
			calls := fake.Calls()
			var members []string
			for _, c := range calls {
				members = append(members, c.Member)
			}
			want := []string{"Get", "Subscribe", "StartTransientUnit", "StopUnit"}
			if bus {
				want = []string{"Hello", "Get", "AddMatch", "Subscribe", "StartTransientUnit", "StopUnit"}
			}
			if !reflect.DeepEqual(members, want) {
				t.Fatalf("calls %v, want %v", members, want)
			}
			start := calls[len(calls)-2]
			if pids := start.Props["PIDs"]; pids.Sig != "au" || !reflect.DeepEqual(pids.Value, []any{uint32(42)}) {
				t.Errorf("PIDs property: %#v", pids)
			}
		})
	}
}

func TestFakeManagerErrors(t *testing.T) {
	t.Run("error reply", func(t *testing.T) {
		dir := t.TempDir()
		fake := &sdbustest.Manager{OnStart: func(sdbustest.Call) (string, *sdbus.Error) {
			return "", &sdbus.Error{Name: "org.freedesktop.systemd1.UnitExists", Message: "Unit agentrun-x.scope already exists."}
		}}
		fake.ServeUserManager(t, dir)
		m := dial(t, dir)
		_, err := m.StartTransientUnit(context.Background(), "agentrun-x.scope", "fail", nil)
		var de *sdbus.Error
		if !errors.As(err, &de) || de.Name != "org.freedesktop.systemd1.UnitExists" {
			t.Fatalf("want the UnitExists error reply, got %v", err)
		}
		_, err = m.StopUnit(context.Background(), "agentrun-x.scope", "replace")
		if err != nil {
			t.Fatalf("the connection must stay usable after an error reply: %v", err)
		}
	})
	hanging := func(t *testing.T) *sdbus.Manager {
		dir := t.TempDir()
		(&sdbustest.Manager{Hang: true}).ServeUserManager(t, dir)
		return dial(t, dir)
	}
	t.Run("hang hits the deadline", func(t *testing.T) {
		m := hanging(t)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := m.StartTransientUnit(ctx, "agentrun-x.scope", "fail", nil)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("want DeadlineExceeded, got %v", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("took %v", d)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		m := hanging(t)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		if _, err := m.StartTransientUnit(ctx, "agentrun-x.scope", "fail", nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("want Canceled, got %v", err)
		}
	})
	t.Run("nothing listening", func(t *testing.T) {
		eps := []sdbus.Endpoint{{Path: t.TempDir() + "/systemd/private"}}
		if _, err := sdbus.DialManager(context.Background(), eps, 0); !errors.Is(err, sdbus.ErrNoManager) {
			t.Fatalf("want ErrNoManager, got %v", err)
		}
	})
}
