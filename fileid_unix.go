//go:build unix

package agentrun

import (
	"io/fs"
	"syscall"
)

// fileID is fi's device and inode, when the host gives them.
func fileID(fi fs.FileInfo) (FileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st == nil {
		return FileID{}, false
	}
	// Dev is an int32 on darwin.
	return FileID{Dev: uint64(st.Dev), Ino: st.Ino}, true
}
