//go:build !linux

package agentrun

import (
	"os"
	"path/filepath"
)

func physicalWd() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(wd)
}
