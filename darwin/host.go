package darwin

import "fmt"

// ptyName is the device path macOS gives the pty slave with this device
// number: /dev/ttys followed by the minor number in three or more digits.
// Terminals checks the guess against the real device before using it.
func ptyName(rdev uint64) string {
	return fmt.Sprintf("/dev/ttys%03d", rdev&0xffffff)
}
