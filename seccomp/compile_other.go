//go:build !linux || !cgo

package seccomp

import specs "github.com/opencontainers/runtime-spec/specs-go"

func compileHashed(p *specs.LinuxSeccomp, h Hash) (*Program, error) {
	if err := Validate(p); err != nil {
		return nil, err
	}
	return nil, ErrUnsupported
}

func compilerID() string { return "" }
