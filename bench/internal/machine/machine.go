// Package machine records what the benchmark ran on: kernel, CPU, core count,
// memory, cgroup mode, Go version and the versions of the peer tools. Numbers
// without this context are not comparable across hosts.
package machine

import (
	"bufio"
	"bytes"
	"context"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Info is the machine description stored beside the results.
type Info struct {
	Kernel     string            `json:"kernel"`
	OS         string            `json:"os"`
	CPUModel   string            `json:"cpu_model"`
	NumCPU     int               `json:"nproc"`
	MemTotal   string            `json:"mem_total,omitempty"`
	CgroupMode string            `json:"cgroup_mode"`
	GoVersion  string            `json:"go_version"`
	Tools      map[string]string `json:"tools"`
	// LoadStart and LoadEnd are /proc/loadavg's 1/5/15-minute averages
	// when the run started and ended: a busy machine inflates every
	// contender, and the tails most.
	LoadStart string `json:"loadavg_start,omitempty"`
	LoadEnd   string `json:"loadavg_end,omitempty"`
}

// LoadAvg returns the 1, 5 and 15 minute load averages as text, and the
// 1-minute one as a number (NaN when unknown).
func LoadAvg() (string, float64) {
	f := strings.Fields(readFile("/proc/loadavg"))
	if len(f) < 3 {
		return "", math.NaN()
	}
	one, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		one = math.NaN()
	}
	return strings.Join(f[:3], " "), one
}

// Collect gathers Info. tools maps a display name to the argv that prints its
// version (first line kept); a tool that fails is recorded as "missing".
func Collect(ctx context.Context, tools map[string][]string) Info {
	info := Info{
		Kernel:     firstLine(readFile("/proc/sys/kernel/osrelease")),
		OS:         osName(),
		CPUModel:   cpuModel(readFile("/proc/cpuinfo")),
		NumCPU:     runtime.NumCPU(),
		MemTotal:   memTotal(readFile("/proc/meminfo")),
		CgroupMode: CgroupMode(readFile("/proc/self/mounts")),
		GoVersion:  runtime.Version(),
		Tools:      map[string]string{},
	}
	if info.Kernel == "" {
		info.Kernel = runtime.GOOS
	}
	for name, argv := range tools {
		info.Tools[name] = toolVersion(ctx, argv)
	}
	return info
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}

func osName() string {
	for sc := bufio.NewScanner(strings.NewReader(readFile("/etc/os-release"))); sc.Scan(); {
		if v, ok := strings.CutPrefix(sc.Text(), "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return runtime.GOOS + "/" + runtime.GOARCH
}

// cpuModel extracts the first "model name" from /proc/cpuinfo text.
func cpuModel(cpuinfo string) string {
	for sc := bufio.NewScanner(strings.NewReader(cpuinfo)); sc.Scan(); {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func memTotal(meminfo string) string {
	for sc := bufio.NewScanner(strings.NewReader(meminfo)); sc.Scan(); {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// CgroupMode classifies the cgroup layout from /proc/self/mounts text:
// "v2" when /sys/fs/cgroup itself is cgroup2, "hybrid" when v1 hierarchies
// coexist with a cgroup2 mount (usually /sys/fs/cgroup/unified), "v1" when
// only v1 hierarchies exist, "none" otherwise.
func CgroupMode(mounts string) string {
	var v1, v2, v2root bool
	for sc := bufio.NewScanner(strings.NewReader(mounts)); sc.Scan(); {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		switch f[2] {
		case "cgroup":
			v1 = true
		case "cgroup2":
			v2 = true
			if f[1] == "/sys/fs/cgroup" {
				v2root = true
			}
		}
	}
	switch {
	case v2root && !v1:
		return "v2"
	case v1 && v2:
		return "hybrid"
	case v1:
		return "v1"
	case v2:
		return "v2"
	}
	return "none"
}

func toolVersion(ctx context.Context, argv []string) string {
	if len(argv) == 0 {
		return "missing"
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		return "missing"
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout = &out
	cmd.Stderr = &out // busybox prints its banner on stderr for some invocations
	_ = cmd.Run()     // several tools exit non-zero after printing a version
	if v := firstLine(out.String()); v != "" {
		return v
	}
	return "unknown"
}
