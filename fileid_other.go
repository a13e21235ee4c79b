//go:build !unix

package agentrun

import "io/fs"

// fileID reports no identity: there is no device and inode here.
func fileID(fs.FileInfo) (FileID, bool) { return FileID{}, false }
