// Package procid names a process across pid reuse: its pid, the start time
// /proc/<pid>/stat gives, and its PID namespace, whose pids alone are
// comparable. State records use it for their owners and their inits.
package procid

import (
	"errors"
	"strconv"
	"strings"
)

// ParseStartTime reads the start time from a /proc/<pid>/stat line. The
// command name in parentheses may hold spaces and parentheses itself, so
// the fields are counted from the last ')'.
func ParseStartTime(stat []byte) (uint64, error) {
	_, start, err := parseStat(stat)
	return start, err
}

// parseStat reads the state (field 3) and the start time of a
// /proc/<pid>/stat line.
func parseStat(stat []byte) (state byte, start uint64, err error) {
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, errors.New("procid: malformed stat line")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); starttime is field 22.
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, errors.New("procid: short stat line")
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return f[0][0], start, err
}
