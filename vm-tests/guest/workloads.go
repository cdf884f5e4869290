package main

import "github.com/escra-dev/escra/vm-tests/harness"

// workloads are subcommands the scenarios start inside cgroups; each is
// defined beside the scenario that uses it, the generic ones in harness.
var workloads = map[string]harness.Workload{
	"hog-cpu":          harness.HogCPU,
	"busy":             harness.Busy,
	"hog-mem":          harness.HogMem,
	"unpriv":           unpriv,
	"controller":       controllerProc,
	"hog-mem-until":    hogMemUntil,
	"burst":            burst,
	"owner-hold":       ownerHold,
	"write-file":       writeFile,
	"mmap-file":        mmapFile,
	"mmap-locked":      mmapLocked,
	"ballast":          ballast,
	"hog-rounds":       hogRounds,
	"hog-rounds-child": hogRoundsChild,
	"hog-mmap":         hogMmap,
}
