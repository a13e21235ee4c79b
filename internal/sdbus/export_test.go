package sdbus

import "time"

// SetIdleClose sets how long c keeps an unused connection open.
func SetIdleClose(c *Client, d time.Duration) {
	c.mu.Lock()
	c.idleAfter = d
	c.mu.Unlock()
}
