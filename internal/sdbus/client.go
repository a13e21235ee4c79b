package sdbus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Client shares one connection to a systemd manager among goroutines:
// opened on first use (and subscribed to JobRemoved), opened again when
// it breaks, closed once unused for a second.
//
// Requests go out one at a time. systemd's manager answers one message
// at a time anyway, from all its clients, so several in flight would not
// finish sooner; one at a time lets each request's time limit measure the
// manager's answer to that request alone. Time spent waiting behind other
// goroutines' requests counts only against the caller's context. A job's
// wait holds no turn.
//
// Requests that may be repeated are repeated when the manager does not
// answer in time or the connection breaks: reads, and those whose
// repetition does what the first would have (Subscribe, StopUnit,
// AttachProcessesToUnit). StartTransientUnit is repeated only once the
// manager says the unit does not exist.
type Client struct {
	eps     []Endpoint
	uid     int
	timeout time.Duration

	turn chan struct{} // holds a token while a request is out

	mu    sync.Mutex
	m     *Manager // nil until first use, after a break and when idle
	cg    string   // the manager's ControlGroup, read once per connection
	users int      // calls under way; the connection is idle at 0
	idle  *time.Timer
	// idleAfter is idleClose; tests shorten it.
	idleAfter time.Duration
}

// attempts is how often a request that may be repeated is made.
const attempts = 3

// idleClose is how long an unused connection stays open: long enough
// for the requests of one sandbox's start to share it, short enough that
// a sandbox that runs for a while holds none. On its private socket the
// manager builds every signal (each unit's every change) for every peer,
// so each idle connection makes all of its work slower. The owner (a
// cgroups.Manager) has no Close.
const idleClose = time.Second

// NewClient returns a client for the manager at the first of eps that
// answers, authenticating as uid. timeout bounds the manager's answer to
// one request, counted from when it is sent, and the wait for one job.
func NewClient(eps []Endpoint, uid int, timeout time.Duration) *Client {
	return &Client{eps: eps, uid: uid, timeout: timeout, turn: make(chan struct{}, 1), idleAfter: idleClose}
}

// Close closes the connection, if open. The client stays usable.
func (c *Client) Close() error {
	c.mu.Lock()
	m := c.m
	c.m, c.cg = nil, ""
	c.mu.Unlock()
	if m != nil {
		return m.Close()
	}
	return nil
}

// use marks a call under way until the returned function is called; the
// connection closes idleAfter after the last one.
func (c *Client) use() (done func()) {
	c.mu.Lock()
	c.users++
	if c.idle != nil {
		c.idle.Stop()
		c.idle = nil
	}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.users--
		if c.users > 0 || c.m == nil {
			return
		}
		m := c.m
		c.idle = time.AfterFunc(c.idleAfter, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.users == 0 && c.m == m {
				c.m, c.cg = nil, ""
				m.Close()
			}
		})
	}
}

// conn returns the open connection, or opens one. The caller holds the
// turn, so only one goroutine dials.
func (c *Client) conn(ctx context.Context) (*Manager, error) {
	c.mu.Lock()
	m := c.m
	if m != nil && m.Err() != nil {
		c.m, c.cg = nil, ""
		m = nil
	}
	c.mu.Unlock()
	if m != nil {
		return m, nil
	}
	dctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	m, err := DialManager(dctx, c.eps, c.uid)
	if err != nil {
		return nil, err
	}
	// Once per connection: a bus daemon routes JobRemoved only after it.
	if err := m.Subscribe(dctx); err != nil {
		m.Close()
		return nil, err
	}
	c.mu.Lock()
	c.m = m
	c.mu.Unlock()
	return m, nil
}

// do makes one request f when its turn comes and gives the manager
// c.timeout from then to answer. Waiting for the turn is bounded by ctx
// alone.
func (c *Client) do(ctx context.Context, f func(context.Context, *Manager) error) error {
	select {
	case c.turn <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("sdbus: waiting behind other requests to the manager: %w", ctx.Err())
	}
	defer func() { <-c.turn }()
	m, err := c.conn(ctx)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return f(rctx, m)
}

// again reports whether a request that failed with err may be worth
// repeating: the manager gave no answer in time or the connection broke,
// and ctx leaves time for it.
func again(ctx context.Context, err error) bool {
	var reply *Error
	if err == nil || ctx.Err() != nil || errors.As(err, &reply) {
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrClosed)
}

// retry makes the repeatable request f up to attempts times.
func (c *Client) retry(ctx context.Context, f func(context.Context, *Manager) error) error {
	var err error
	for range attempts {
		if err = c.do(ctx, f); !again(ctx, err) {
			break
		}
	}
	return err
}

// ControlGroup reads the manager's own cgroup; see Manager.ControlGroup.
func (c *Client) ControlGroup(ctx context.Context) (string, error) {
	defer c.use()()
	c.mu.Lock()
	cg := c.cg
	if c.m == nil || c.m.Err() != nil {
		cg = ""
	}
	c.mu.Unlock()
	if cg != "" {
		return cg, nil
	}
	err := c.retry(ctx, func(ctx context.Context, m *Manager) error {
		var err error
		if cg, err = m.ControlGroup(ctx); err == nil {
			c.mu.Lock()
			if c.m == m {
				c.cg = cg
			}
			c.mu.Unlock()
		}
		return err
	})
	return cg, err
}

// AttachProcessesToUnit moves pids into the unit's cgroup, or subcgroup
// below it; see Manager.AttachProcessesToUnit. Moving a process where it
// already is changes nothing, so the request may be repeated.
func (c *Client) AttachProcessesToUnit(ctx context.Context, unit, subcgroup string, pids []uint32) error {
	defer c.use()()
	return c.retry(ctx, func(ctx context.Context, m *Manager) error {
		return m.AttachProcessesToUnit(ctx, unit, subcgroup, pids)
	})
}

// StartTransientUnit starts the transient unit name in mode "fail" and
// waits for its job; it returns the job's result ("done" when the unit
// runs). When the manager does not answer in time, or the answer or the
// job's end is lost with the connection, the unit's state tells what
// they would have said: a unit that does not exist is asked for again,
// one that does is never asked for twice.
func (c *Client) StartTransientUnit(ctx context.Context, name string, props []Property) (string, error) {
	defer c.use()()
	var err error
	for i := range attempts {
		var m *Manager
		var job ObjectPath
		err = c.do(ctx, func(ctx context.Context, mm *Manager) error {
			var err error
			m = mm
			job, err = mm.StartTransientUnit(ctx, name, "fail", props)
			return err
		})
		var reply *Error
		switch {
		case err == nil:
			return c.awaitStart(ctx, m, job, name)
		case i > 0 && errors.As(err, &reply) && reply.Name == ErrUnitExists:
			// An earlier request got through after all.
			return c.settle(ctx, name)
		case !again(ctx, err):
			return "", err
		}
		exists, uerr := c.exists(ctx, name)
		if uerr != nil {
			return "", errors.Join(err, uerr)
		}
		if exists {
			return c.settle(ctx, name)
		}
	}
	return "", err
}

// awaitStart waits for the start job; when its JobRemoved does not come
// in time or the connection breaks, the unit's state is the answer.
func (c *Client) awaitStart(ctx context.Context, m *Manager, job ObjectPath, name string) (string, error) {
	wctx, cancel := context.WithTimeout(ctx, c.timeout)
	result, err := m.WaitJob(wctx, job)
	cancel()
	if err == nil || !again(ctx, err) {
		return result, err
	}
	return c.settle(ctx, name)
}

// exists asks whether the unit is loaded.
func (c *Client) exists(ctx context.Context, name string) (bool, error) {
	err := c.retry(ctx, func(ctx context.Context, m *Manager) error {
		_, err := m.GetUnit(ctx, name)
		return err
	})
	if IsNoSuchUnit(err) {
		return false, nil
	}
	return err == nil, err
}

// settle waits, within ctx, until the unit name is no longer activating
// and returns "done" when it is active, the job result a start that
// failed would have had otherwise.
func (c *Client) settle(ctx context.Context, name string) (string, error) {
	pause := 10 * time.Millisecond
	for {
		var state string
		err := c.retry(ctx, func(ctx context.Context, m *Manager) error {
			path, err := m.GetUnit(ctx, name)
			if err != nil {
				return err
			}
			state, err = m.ActiveState(ctx, path)
			return err
		})
		switch {
		case IsNoSuchUnit(err):
			return "failed", nil // failed and collected (CollectMode)
		case err != nil:
			return "", err
		case state == "active":
			return "done", nil
		case state != "activating" && state != "reloading":
			return "failed", nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("sdbus: unit %s still %s: %w", name, state, ctx.Err())
		case <-time.After(pause):
		}
		pause = min(2*pause, 200*time.Millisecond)
	}
}

// StopUnit stops the unit name (mode "replace") and waits for its job.
// A unit that is not loaded counts as stopped. Asking again for a unit
// already stopping joins the pending job, so a request without an answer,
// or a job whose end was lost, is simply asked again.
func (c *Client) StopUnit(ctx context.Context, name string) error {
	defer c.use()()
	var err error
	for range attempts {
		var m *Manager
		var job ObjectPath
		err = c.do(ctx, func(ctx context.Context, mm *Manager) error {
			var err error
			m = mm
			job, err = mm.StopUnit(ctx, name, "replace")
			return err
		})
		if IsNoSuchUnit(err) {
			return nil
		}
		if err == nil {
			wctx, cancel := context.WithTimeout(ctx, c.timeout)
			var result string
			result, err = m.WaitJob(wctx, job)
			cancel()
			if err == nil {
				if result != "done" {
					return fmt.Errorf("sdbus: stop job %s", result)
				}
				return nil
			}
		}
		if !again(ctx, err) {
			return err
		}
	}
	return err
}
