//go:build !unix

package agentrun

import "io/fs"

// fileID: no device and inode here.
func fileID(fs.FileInfo) (FileID, bool) { return FileID{}, false }
