package rescue

import "time"

// Event is one OOM of a watched group as a backend saw it: the kernel's
// held charge (escra.ko), a v1 OOM wake-up or a v2 memory.high increment.
type Event struct {
	Handle uint32
	At     time.Time // when the wake-up was read
	Usage  uint64
	Limit  int64
}
