package agent

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// OOMTimeoutParam is escra.ko's own verdict deadline: how long a faulting
// task waits in the kernel before the module lets the charge fail.
const OOMTimeoutParam = "/sys/module/escra/parameters/oom_timeout_ms"

// OOMReplyMargin is what escrad keeps between its own deadline and the
// kernel's: the resolving reply's netlink trip and a scheduling delay of
// the timer goroutine on a loaded host. A verdict that lands inside the
// kernel's wait is acted on; one after it meets a task already on the
// kill path.
const OOMReplyMargin = 10 * time.Millisecond

// defaultOOMDeadline is the verdict deadline on the stock-kernel backends,
// where the trap holds the tasks as long as escrad wants.
const defaultOOMDeadline = 200 * time.Millisecond

// oomDeadline is the verdict deadline to run with. On escra.ko it is one
// deadline with the module's: 0 (unset) is the module's oom_timeout_ms
// minus OOMReplyMargin, and a deadline that with the margin exceeds the
// module's is refused. escrad's deadline budgets the whole controller
// round trip (the request, the allocator's verdict, the limit write), so
// it is the one that must fit inside the kernel's.
func oomDeadline(set time.Duration, kernel bool, param string) (time.Duration, error) {
	if !kernel {
		if set <= 0 {
			return defaultOOMDeadline, nil
		}
		return set, nil
	}
	if param == "" {
		param = OOMTimeoutParam
	}
	b, err := os.ReadFile(param)
	if err != nil {
		return 0, fmt.Errorf("kernel backend: cannot read escra.ko's OOM timeout to check --oom-deadline against it: %v", err)
	}
	ms, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil || ms == 0 {
		return 0, fmt.Errorf("kernel backend: %s holds %q, not a timeout in ms", param, strings.TrimSpace(string(b)))
	}
	kt := time.Duration(ms) * time.Millisecond
	if set <= 0 {
		if kt <= 2*OOMReplyMargin {
			return kt / 2, nil
		}
		return kt - OOMReplyMargin, nil
	}
	if set+OOMReplyMargin > kt {
		return 0, fmt.Errorf("--oom-deadline %v plus the %v reply margin exceeds escra.ko's oom_timeout_ms %d (%s): a verdict after the kernel gave up finds the task on the kill path; lower --oom-deadline (0: fit it to the module) or raise the module's timeout",
			set, OOMReplyMargin, ms, param)
	}
	return set, nil
}

// FitOOMDeadline is the deadline escrad runs with on escra.ko whose
// oom_timeout_ms is in the file param (see oomDeadline), or why set does
// not fit (escrad checks before it starts anything).
func FitOOMDeadline(set time.Duration, param string) (time.Duration, error) {
	return oomDeadline(set, true, param)
}
