//go:build linux && !cgo

package nsinit

// haveCInit: this build has no cgo, so only the Go init exists.
const haveCInit = false

func startC(*Config) (*Process, error) {
	return nil, &StepError{Step: "init backend", Msg: "the C init needs a cgo build"}
}

// DiscardPrestart does nothing: prestart needs the C init.
func DiscardPrestart() {}
