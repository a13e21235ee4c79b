//go:build linux

package agentrun

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Pool keeps sessions of one policy built ahead, so that a runner that
// wants a fresh sandbox for every tool call takes one without waiting for
// a build: Take, run, Close (which returns at once; the session is
// deleted in the background). It refills in the background. Its methods
// may be called from any goroutine.
type Pool struct {
	policy *Policy
	spec   *specs.Spec
	opts   SessionOptions
	ready  chan *Session

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	lastTake atomic.Int64 // unix nanoseconds

	mu  sync.Mutex
	err error // the last build's failure, while nothing is in stock
}

// poolRetry is how long a builder waits after a failed build.
const poolRetry = 200 * time.Millisecond

// poolRefillDelay is how long after a Take the builders wait before they
// build again.
const poolRefillDelay = 20 * time.Millisecond

// NewPool compiles p once and starts building sessions of it. The first
// build's failure is returned, so that a policy this host cannot enforce
// fails here and not at every Take.
func NewPool(ctx context.Context, p *Policy, o PoolOptions) (*Pool, error) {
	size := o.Size
	if size <= 0 {
		size = 2
	}
	spec, err := compileSession(p)
	if err != nil {
		return nil, err
	}
	first, err := openLocal(ctx, p, spec, SessionOptions{Warn: o.Warn})
	if err != nil {
		return nil, err
	}
	first.background = true
	pctx, cancel := context.WithCancel(context.Background())
	pl := &Pool{policy: p, spec: spec, opts: SessionOptions{Warn: o.Warn}, ready: make(chan *Session, size), ctx: pctx, cancel: cancel}
	pl.ready <- first
	// Two builders at most: more would only compete for the CPUs that
	// the sessions taken from the pool run on.
	for i := 0; i < min(size, 2); i++ {
		pl.wg.Add(1)
		go pl.build()
	}
	return pl, nil
}

// build keeps the pool full until it is closed.
func (pl *Pool) build() {
	defer pl.wg.Done()
	for pl.ctx.Err() == nil {
		// A build right after a Take would compete with the taker's
		// command for the CPUs; it waits for that first.
		if d := time.Until(time.Unix(0, pl.lastTake.Load()).Add(poolRefillDelay)); d > 0 {
			select {
			case <-time.After(d):
			case <-pl.ctx.Done():
				return
			}
		}
		s, err := openLocal(pl.ctx, pl.policy, pl.spec, pl.opts)
		if err != nil {
			if pl.ctx.Err() != nil {
				return
			}
			pl.mu.Lock()
			pl.err = err
			pl.mu.Unlock()
			select {
			case <-time.After(poolRetry):
			case <-pl.ctx.Done():
			}
			continue
		}
		s.background = true
		// The first command in a new sandbox costs about a millisecond
		// more than later ones; it is paid here, before anyone waits.
		if res, err := s.Exec(pl.ctx, ExecRequest{Args: []string{"/bin/true"}}); err != nil || res.ExitCode != 0 {
			_ = s.b.delete()
			if pl.ctx.Err() != nil {
				return
			}
			if err == nil {
				err = fmt.Errorf("/bin/true in a new session exited %d", res.ExitCode)
			}
			pl.mu.Lock()
			pl.err = err
			pl.mu.Unlock()
			select {
			case <-time.After(poolRetry):
			case <-pl.ctx.Done():
			}
			continue
		}
		pl.mu.Lock()
		pl.err = nil
		pl.mu.Unlock()
		select {
		case pl.ready <- s:
		case <-pl.ctx.Done():
			_ = s.b.delete()
			return
		}
	}
}

// ErrPoolClosed is the error of Take on a closed Pool.
var ErrPoolClosed = errors.New("agentrun: the pool is closed")

// Take returns a session no one has used, waiting for one to be built if
// none is ready. Its Close returns at once.
func (pl *Pool) Take(ctx context.Context) (*Session, error) {
	pl.lastTake.Store(time.Now().UnixNano())
	for {
		select {
		case s := <-pl.ready:
			if s.Alive() {
				return s, nil
			}
			_ = s.Close()
			continue
		default:
		}
		pl.mu.Lock()
		err := pl.err
		pl.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("agentrun: pool: %w", err)
		}
		select {
		case s := <-pl.ready:
			if s.Alive() {
				return s, nil
			}
			_ = s.Close()
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-pl.ctx.Done():
			return nil, ErrPoolClosed
		case <-time.After(poolRetry):
			// Look at the builders' error again.
		}
	}
}

// Close stops the builders and deletes the sessions in stock; sessions
// taken from the pool are their takers' to close.
func (pl *Pool) Close() error {
	pl.cancel()
	pl.wg.Wait()
	var errs []error
	for {
		select {
		case s := <-pl.ready:
			errs = append(errs, s.b.delete())
		default:
			return errors.Join(errs...)
		}
	}
}
