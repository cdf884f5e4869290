package limits

import "github.com/escra-dev/escra/daemon/cgroups"

// RaiseMemoryFrom raises h's memory limit on the daemon's own authority
// (host-local memory credit): raise gets the limit in place and returns
// the limit to write (<= the current one: nothing is written). Like
// RaiseCPU it bumps no generation. It returns the limits before and after.
func (a *Applier) RaiseMemoryFrom(h uint32, raise func(cur int64) int64) (before, now int64, err error) {
	e := a.Get(h)
	if e == nil {
		return 0, 0, ErrUnknown
	}
	e.mu.Lock()
	cur := e.cur.MemoryBytes
	if l := raise(cur); cur != cgroups.Max && l > cur {
		err = e.write(0, 0, l, "")
	}
	now = e.cur.MemoryBytes
	docker := e.Docker
	e.mu.Unlock()
	if err == nil && now != cur && docker && a.Reconcile != nil {
		a.Reconcile.Mark(h)
	}
	return cur, now, err
}
