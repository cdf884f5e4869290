package harness

import (
	"fmt"
	"strconv"
	"time"
)

// BrakeMargin is escrad's memory.high margin below memory.max on the
// cgroupfs backend (cgroupfs.Watcher).
const BrakeMargin = 8 << 20

// BrakeFor is the memory.high escrad sets for memory.max max.
func BrakeFor(max int64) string { return strconv.FormatInt(max-BrakeMargin, 10) }

// WaitBrake waits until memory.high is want ("max" or bytes).
func WaitBrake(cg *Cgroup, want string, d time.Duration) error {
	var got string
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if got, _ = cg.Get("memory.high"); got == want {
			return nil
		}
	}
	return fmt.Errorf("memory.high %s after %v, want %s", got, d, want)
}
