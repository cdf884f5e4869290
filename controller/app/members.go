package app

import (
	"errors"
	"math"
	"time"

	"github.com/escra-dev/escra/controller/allocator"
	"github.com/escra-dev/escra/controller/events"
)

// MemberInfo identifies a member to the app.
type MemberInfo struct {
	Key         allocator.Key
	Host        Host
	HostID      string
	Handle      uint32
	ContainerID string
	Name        string
	HostMaxUs   int64
	MemUsage    int64
	// The limits its cgroup holds at registration (allocator.Join).
	CurQuotaUs, CurMem int64
	// Its own limits, what its daemon falls back to (allocator.Join).
	OwnQuotaUs, OwnMem int64
	// Auto-created apps grow their budget by these when the member joins.
	ContribCores float64
	ContribMem   int64
}

type member struct {
	MemberInfo
}

// Join adds a member and bootstraps it (eq. (2)).
func (s *App) Join(mi MemberInfo) error {
	err := ErrRetired // stays so when the app is stopped
	s.call(func() {
		err = nil
		if s.retired {
			err = ErrRetired
			return
		}
		if s.auto {
			b := allocator.Budget{CPUCores: mi.ContribCores, MemoryBytes: mi.ContribMem}
			if len(s.members) > 0 {
				b = s.a.Budget()
				b.CPUCores += mi.ContribCores
				b.MemoryBytes += mi.ContribMem
			}
			if _, e := s.a.SetBudget(b); e != nil {
				err = e
				return
			}
		}
		// The container is back under control: its held share (if its
		// host's last session died) returns with this join.
		s.a.Unhold(holdID(mi.HostID, mi.ContainerID))
		delete(s.holds, holdID(mi.HostID, mi.ContainerID))
		s.creditRejoined(mi) // memcredit.go
		var ds []allocator.Decision
		maxQ, maxM := s.capsOf(mi.Name)
		ds, err = s.a.Join(allocator.Join{Key: mi.Key, HostMaxUs: mi.HostMaxUs, MemUsage: mi.MemUsage,
			CurQuotaUs: mi.CurQuotaUs, CurMem: mi.CurMem, MaxQuotaUs: maxQ, MaxMem: maxM,
			OwnQuotaUs: mi.OwnQuotaUs, OwnMem: mi.OwnMem})
		if err != nil {
			return
		}
		s.members[mi.Key] = &member{MemberInfo: mi}
		s.hosts[mi.Key.Host()] = mi.Host
		s.applyAll(ds)
		s.publish(mi, "join", "")
	})
	return err
}

// ErrRetired says the app was emptied and forgotten: look it up again.
var ErrRetired = errors.New("app: emptied auto app retired")

// RetireIfEmpty marks an auto app without members as retired (every later
// Join fails with ErrRetired) and reports whether it did: the caller then
// forgets and stops it. Defined apps are never retired.
func (s *App) RetireIfEmpty() bool {
	var ok bool
	s.call(func() {
		if s.auto && len(s.members) == 0 {
			s.retired, ok = true, true
		}
	})
	return ok
}

// Leave removes a member; an auto app shrinks by its contribution.
func (s *App) Leave(k allocator.Key, reason string) {
	s.do(func() { s.leave(k, reason) })
}

func (s *App) leave(k allocator.Key, reason string) {
	{
		m := s.members[k]
		if m == nil {
			return
		}
		ds, _ := s.a.Leave(k)
		delete(s.members, k)
		if s.auto && len(s.members) > 0 {
			b := s.a.Budget()
			b.CPUCores = math.Max(b.CPUCores-m.ContribCores, 0.01)
			b.MemoryBytes = max(b.MemoryBytes-m.ContribMem, 4*allocator.MiB)
			more, _ := s.a.SetBudget(b)
			ds = append(ds, more...)
		}
		s.applyAll(ds)
		s.publish(m.MemberInfo, "leave", reason)
	}
}

// LeaveHeld removes a member whose host's session died and holds what its
// cgroup may hold out of the pools (allocator/hold.go) until the container
// rejoins, its host rejoins without it (HostBack), or hold passes (the
// host is presumed lost).
func (s *App) LeaveHeld(k allocator.Key, reason string, hold time.Duration) {
	s.do(func() {
		m := s.members[k]
		// An auto app shrinks instead; a recommend-mode app applied
		// nothing its host could still hold.
		if m == nil || s.auto || hold <= 0 || s.recommend {
			s.leave(k, reason)
			return
		}
		id := holdID(m.HostID, m.ContainerID)
		ds, _ := s.a.LeaveHeld(k, id)
		delete(s.members, k)
		s.applyAll(ds)
		s.publish(m.MemberInfo, "leave", reason)
		s.expireHold(id, hold)
	})
}

func (s *App) publish(mi MemberInfo, kind, reason string) {
	if s.hub.Active() {
		s.hub.Publish(events.Event{Time: time.Now(), App: s.Name, Host: mi.HostID, ContainerID: mi.ContainerID,
			Handle: mi.Handle, Kind: kind, Reason: reason})
	}
}

// Usage records a member's memory usage sample on the caller's goroutine
// (the session's reader) under the app's lock: a sample only replaces the
// last one, so it need not wait for the app's queue, and a closure per
// sample would be most of the app's queue.
func (s *App) Usage(k allocator.Key, usage int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.recommend {
		s.a.Usage(k, usage)
		return
	}
	if d, ok := s.a.ShadowUsage(k, usage); ok {
		s.send(d, 0, nil, true)
	}
}
