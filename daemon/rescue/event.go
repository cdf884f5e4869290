package rescue

import "time"

// Event is one OOM of a watched group as a backend saw it: the kernel's
// held charge (escra.ko), a v1 OOM wake-up or a v2 memory.high increment.
type Event struct {
	Handle uint32
	At     time.Time // when the wake-up was read
	Usage  uint64
	Limit  int64
	// Pages is how many pages the charge that met the limit wanted (the
	// controller's grant is at least that), 0 when the backend cannot
	// know: only escra.ko sees the charge; the stock-kernel traps see an
	// OOM or memory.high moment after it.
	Pages uint64
}
