package cgroupfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/escra-dev/escra/daemon/cgroups"
)

// Restored is what RestoreRecorded did to one memory.oom_control.
type Restored struct {
	Path     string
	Armed    bool  // it was set (oom_kill_disable 1, or a memory.high brake), not already clear
	UnderOOM bool  // a task was waiting at its limit: the kernel OOM killer acts now
	Err      error // nil: oom_kill_disable is 0
}

// RestoreRecorded re-enables the kernel OOM killer of every group listed
// in the state file plus extra (the labelled containers' groups), for when
// escrad and its guard died together. A listed group that is gone
// (container removed) is skipped. The state file is left for the next
// escrad to rewrite. A missing state file is not an error (nothing armed).
func RestoreRecorded(state string, extra []string) ([]Restored, error) {
	paths := map[string]bool{}
	for _, p := range extra {
		paths[p] = true
	}
	b, err := os.ReadFile(state)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("oom state: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && l[0] != '#' {
			paths[l] = true
		}
	}
	ps := make([]string, 0, len(paths))
	for p := range paths {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	var out []Restored
	for _, p := range ps {
		r, ok := restoreOne(p)
		if ok {
			out = append(out, r)
		}
	}
	return out, nil
}

// restoreOne writes oom_kill_disable 0 (v2: memory.high max, the brake
// released); ok is false when the group is gone. Only absolute, clean paths
// to a memory.oom_control or memory.high are touched (the state file is
// root's, but a corrupt line must not make us write elsewhere).
func restoreOne(p string) (Restored, bool) {
	r := Restored{Path: p}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || filepath.Base(p) != "memory.oom_control" && filepath.Base(p) != "memory.high" {
		r.Err = errors.New("not a memory.oom_control or memory.high path; skipped")
		return r, true
	}
	before, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return r, false
	}
	if v, ok := cgroups.KeyedValue(before, "under_oom"); ok && v == 1 {
		r.UnderOOM = true
	}
	if filepath.Base(p) == "memory.high" {
		r.Armed = strings.TrimSpace(string(before)) != "max"
	} else if v, ok := cgroups.KeyedValue(before, "oom_kill_disable"); ok && v == 1 {
		r.Armed = true
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return r, false
	}
	if err == nil {
		_, err = f.Write(restoreValue(p))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	r.Err = err
	return r, true
}

// restoreValue is what clears an armed file: oom_kill_disable 0 (v1), or
// no brake, memory.high max (v2).
func restoreValue(p string) []byte {
	if filepath.Base(p) == "memory.high" {
		return []byte("max")
	}
	return []byte("0")
}

// UnderOOM reports whether a task of the group of memory.oom_control p
// waits at its limit (false when the group is gone).
func UnderOOM(p string) bool {
	b, err := os.ReadFile(p)
	if err != nil {
		return false
	}
	v, ok := cgroups.KeyedValue(b, "under_oom")
	return ok && v == 1
}
