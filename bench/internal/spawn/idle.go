//go:build linux

package spawn

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentrun/agentrun/bench/internal/report"
)

// IdleSessions makes n sessions with `agentrun create` side by side and
// measures the memory of their processes (each session's holder and init)
// while they idle, then deletes them. PSS shares each page among the
// processes that map it, so the binary's pages, which all holders share,
// count once in the total; RSS counts them in every process.
func IdleSessions(ctx context.Context, agentrun, workspace string, n int, progress func(string, ...any)) report.IdleSessions {
	out := report.IdleSessions{Sessions: n, Status: report.StatusOK}
	bin, err := filepath.Abs(agentrun)
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		out.Status, out.Reason = report.StatusMissing, err.Error()
		return out
	}
	prefix := fmt.Sprintf("idle-%d-", os.Getpid())
	var ids []string
	defer func() {
		// Deleted four at a time; a session left by a failure is deleted too.
		var wg sync.WaitGroup
		ch := make(chan string)
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for id := range ch {
					_ = exec.Command(bin, "delete", "-f", id).Run()
				}
			}()
		}
		for _, id := range ids {
			ch <- id
		}
		close(ch)
		wg.Wait()
	}()
	before := memAvailableKiB()
	start := time.Now()
	var pids []int
	for i := 0; i < n; i++ {
		id := prefix + strconv.Itoa(i)
		cmd := exec.CommandContext(ctx, bin, "create", "--workspace", workspace, "--idle-timeout", "30m", "--json", id)
		b, err := cmd.Output()
		if err != nil {
			out.Status, out.Reason = report.StatusFailed, fmt.Sprintf("create %d of %d: %v", i+1, n, err)
			return out
		}
		ids = append(ids, id)
		var ready struct{ Pid, Holder int }
		if err := json.Unmarshal(b, &ready); err != nil || ready.Pid == 0 || ready.Holder == 0 {
			out.Status, out.Reason = report.StatusFailed, fmt.Sprintf("create printed %q", b)
			return out
		}
		pids = append(pids, ready.Holder, ready.Pid)
		if (i+1)%100 == 0 {
			progress("idle sessions: %d of %d made", i+1, n)
		}
	}
	out.CreateWallMS = durMS(time.Since(start))
	// Let them settle: the holders' start-up garbage is collected.
	time.Sleep(2 * time.Second)
	for i, pid := range pids {
		m, err := smapsRollup(pid)
		if err != nil {
			out.Status, out.Reason = report.StatusFailed, err.Error()
			return out
		}
		out.PSSKiB += m["Pss"]
		out.RSSKiB += m["Rss"]
		out.AnonKiB += m["Anonymous"]
		if i%2 == 0 {
			out.HolderPSSKiB += m["Pss"]
		}
	}
	if after := memAvailableKiB(); before > 0 && after > 0 {
		out.MemAvailableDropKiB = before - after
	}
	return out
}

// smapsRollup reads the kB figures of /proc/PID/smaps_rollup.
func smapsRollup(pid int) (map[string]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) == 2 && fs[1] == "kB" {
			if n, err := strconv.ParseInt(fs[0], 10, 64); err == nil {
				m[k] = n
			}
		}
	}
	return m, sc.Err()
}

// memAvailableKiB is MemAvailable of /proc/meminfo, 0 if unreadable.
func memAvailableKiB() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "MemAvailable:"); ok {
			fs := strings.Fields(v)
			if len(fs) > 0 {
				n, _ := strconv.ParseInt(fs[0], 10, 64)
				return n
			}
		}
	}
	return 0
}
