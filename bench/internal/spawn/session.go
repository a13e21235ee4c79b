//go:build linux

package spawn

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/agentrun/agentrun"
	"github.com/agentrun/agentrun/bench/internal/report"
)

// Session contenders: a command in a session that lives across rounds,
// and the making of a session.
const (
	// SessionExec is Session.Exec of /bin/true with its output captured,
	// from this process: the hot path of a Go runner with a session. Its
	// goal is a p50 within 1.25× fork+exec.
	SessionExec = "session-exec"
	// SessionExecCLI is `agentrun exec ID -- /bin/true` into a session
	// made once: a shell script's hot path. Goal: ≤ 0.5× bwrap.
	SessionExecCLI = "session-exec-cli"
	// SessionCreate is NewSession of the default policy from this
	// process, closed in the background afterwards. Goal: ≤ 1× bwrap.
	SessionCreate = "session-create"
	// PoolExec is a fresh sandbox per command from a Pool: Take, Exec of
	// /bin/true, Close (which returns at once). Goal: ≤ 2× fork+exec
	// while the pool holds stock.
	PoolExec = "pool-exec"
)

// sessionNames lists the session contenders in display order.
func sessionNames() []string { return []string{SessionExec, SessionExecCLI, SessionCreate, PoolExec} }

// sessionExec makes a session in ws for the timed execs; set closes it.
func sessionExec(set *Set, ws string) *Contender {
	c := &Contender{
		Name:    SessionExec,
		Label:   "Session.Exec of /bin/true with captured output, in-process, into a live session (goal ≤ 1.25× fork+exec)",
		Command: "Session.Exec(ExecRequest{Args: [/bin/true]})",
	}
	s, err := agentrun.NewSession(context.Background(), &agentrun.Policy{Workspace: ws}, agentrun.SessionOptions{})
	if err != nil {
		c.Status, c.Reason = report.StatusFailed, err.Error()
		return c
	}
	set.closers = append(set.closers, s.Close)
	c.Status = report.StatusOK
	req := agentrun.ExecRequest{Args: []string{"/bin/true"}}
	c.inProc = func(ctx context.Context) error {
		res, err := s.Exec(ctx, req)
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("exit %d", res.ExitCode)
		}
		return nil
	}
	return c
}

// sessionExecCLI makes a session with the CLI for the timed execs.
func sessionExecCLI(set *Set, path, ws string) *Contender {
	c := agentrunCLI(SessionExecCLI, path, "none")
	c.Label = "agentrun exec ID -- /bin/true into a live session made by agentrun create (goal ≤ 0.5× bwrap)"
	if c.Status != "" {
		return c
	}
	bin := c.argv(0)[0]
	id := fmt.Sprintf("spawnbench-%d", os.Getpid())
	create := exec.Command(bin, "create", "--workspace", ws, "--idle-timeout", "1h", id)
	if out, err := create.CombinedOutput(); err != nil {
		c.Status, c.Reason = report.StatusFailed, fmt.Sprintf("agentrun create: %v: %s", err, strings.TrimSpace(string(out)))
		return c
	}
	set.closers = append(set.closers, func() error {
		if out, err := exec.Command(bin, "delete", "-f", id).CombinedOutput(); err != nil {
			return fmt.Errorf("agentrun delete %s: %v: %s", id, err, out)
		}
		return nil
	})
	argv := []string{bin, "exec", id, "--", "/bin/true"}
	c.argv = func(uint64) []string { return argv }
	c.Command = strings.Join([]string{filepath.Base(path), "exec", "ID", "--", "/bin/true"}, " ")
	return c
}

// sessionCreate times NewSession; each session is closed in the
// background once made, outside the timed part.
func sessionCreate(ws string) *Contender {
	return &Contender{
		Name:    SessionCreate,
		Label:   "NewSession of the default policy, in-process; closed afterwards in the background (goal ≤ 1× bwrap)",
		Status:  report.StatusOK,
		Command: "NewSession(Policy{Workspace: ws})",
		inProc: func(ctx context.Context) error {
			s, err := agentrun.NewSession(ctx, &agentrun.Policy{Workspace: ws}, agentrun.SessionOptions{})
			if err != nil {
				return err
			}
			go s.Close()
			return nil
		},
	}
}

// poolExec takes a fresh session from a pool for every command.
func poolExec(set *Set, ws string) *Contender {
	c := &Contender{
		Name:    PoolExec,
		Label:   "a fresh sandbox per command from a Pool of 2: Take, Exec of /bin/true, Close (goal ≤ 2× fork+exec)",
		Command: "Pool.Take(); Session.Exec([/bin/true]); Session.Close()",
	}
	pl, err := agentrun.NewPool(context.Background(), &agentrun.Policy{Workspace: ws}, agentrun.PoolOptions{Size: 2})
	if err != nil {
		c.Status, c.Reason = report.StatusFailed, err.Error()
		return c
	}
	set.closers = append(set.closers, pl.Close)
	c.Status = report.StatusOK
	req := agentrun.ExecRequest{Args: []string{"/bin/true"}}
	c.inProc = func(ctx context.Context) error {
		s, err := pl.Take(ctx)
		if err != nil {
			return err
		}
		defer s.Close()
		res, err := s.Exec(ctx, req)
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("exit %d", res.ExitCode)
		}
		return nil
	}
	return c
}
