// Command escra-vmtest is the guest half of vm-tests/run.sh: /init of the
// QEMU guest runs it on the patched kernel. It loads escra.ko, drives it
// through daemon/source/kmod the way escrad does, and checks what users care
// about: per-period CPU records (Escra §III, §IV-B), OOM rescue before
// the kill, clean unloads and strict netlink input handling.
//
// It prints "--- PASS"/"--- FAIL" lines on the serial console and exits
// non-zero when any scenario fails. The same binary also serves as the
// workloads (hog-cpu, busy, hog-mem, ...) and the unprivileged client.
package main

import (
	"flag"
	"os"

	"github.com/escra-dev/escra/vm-tests/harness"
)

func main() {
	harness.RunWorkload(workloads)
	module := flag.String("module", "/escra.ko", "path of escra.ko")
	only := flag.String("run", "", "comma-separated scenario names (default: all)")
	flag.Parse()
	os.Exit(harness.Run(scenarios, *module, *only))
}
