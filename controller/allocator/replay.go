package allocator

import (
	"fmt"
	"time"
)

// EventKind names a recorded input.
type EventKind string

const (
	EvDefine EventKind = "define" // App, Budget
	EvJoin   EventKind = "join"   // App, Key, HostMaxUs, Usage
	EvLeave  EventKind = "leave"  // Key
	EvStat   EventKind = "stat"   // Key, Stat
	EvUsage  EventKind = "usage"  // Key, Usage
	EvOOM    EventKind = "oom"    // Key, Usage, Limit, Want
)

// Event is one recorded input; At is the injected clock.
type Event struct {
	At        time.Duration `json:"at"`
	Kind      EventKind     `json:"kind"`
	App       string        `json:"app,omitempty"`
	Budget    Budget        `json:"budget,omitzero"`
	Key       Key           `json:"key,omitempty"`
	HostMaxUs int64         `json:"host_max_us,omitempty"`
	Stat      Stat          `json:"stat,omitzero"`
	Usage     int64         `json:"usage,omitempty"`
	Limit     int64         `json:"limit,omitempty"`
	Want      int64         `json:"want,omitempty"`
}

// Record is one output of Replay.
type Record struct {
	At       time.Duration
	App      string
	Decision Decision // limit changes (including reclaim, Reason "reclaim")
	Verdict  string   // "", "granted" or "denied" for OOM events
	Err      string   // input the allocator refused (counted, not fatal)
}

// ReasonReclaim marks reclaim decisions in a replay.
const ReasonReclaim Reason = "reclaim"

// Replay feeds a recorded trace to fresh apps and returns every decision in
// order. The daemons are simulated as honest: set-limits apply at once and
// reclaim sets limit = usage + δ on the last usage seen. A periodic reclaim
// runs every reclaimEvery of injected time (0: never). Same input, same
// output: nothing here reads a clock or iterates a map.
func Replay(p Params, pol Policy, reclaimEvery time.Duration, events []Event) ([]Record, error) {
	apps := map[string]*Books{}
	var names []string
	owner := map[Key]*Books{}
	var out []Record
	next := reclaimEvery
	reclaimAll := func(at time.Duration, a *Books, except Key) {
		for _, d := range a.PlanReclaim(except) {
			m := a.members[d.Key]
			if a.Reclaimed(d.Key, d.MemLimit, m.MemUsage) {
				m.Gen++
				out = append(out, Record{At: at, App: a.Name, Decision: Decision{Key: d.Key, Gen: m.Gen,
					MemLimit: d.MemLimit, Reason: ReasonReclaim}})
			}
		}
	}
	for _, ev := range events {
		for reclaimEvery > 0 && ev.At >= next {
			for _, n := range names {
				reclaimAll(next, apps[n], 0)
				for _, d := range apps[n].FillPending() {
					out = append(out, Record{At: next, App: n, Decision: d})
				}
			}
			next += reclaimEvery
		}
		emit := func(a *Books, ds []Decision, err error) {
			if err != nil {
				out = append(out, Record{At: ev.At, App: a.Name, Err: err.Error()})
			}
			for _, d := range ds {
				if d.Gen != 0 {
					out = append(out, Record{At: ev.At, App: a.Name, Decision: d})
				}
			}
		}
		if ev.Kind == EvDefine {
			if a := apps[ev.App]; a != nil {
				ds, err := a.SetBudget(ev.Budget)
				emit(a, ds, err)
				continue
			}
			a, err := NewBooks(ev.App, ev.Budget, p, pol)
			if err != nil {
				return out, fmt.Errorf("replay: define %q: %w", ev.App, err)
			}
			apps[ev.App] = a
			names = append(names, ev.App)
			continue
		}
		if ev.Kind == EvJoin {
			a := apps[ev.App]
			if a == nil {
				return out, fmt.Errorf("replay: join to undefined app %q", ev.App)
			}
			ds, err := a.Join(Join{Key: ev.Key, HostMaxUs: ev.HostMaxUs, MemUsage: ev.Usage})
			if err == nil {
				owner[ev.Key] = a
			}
			emit(a, ds, err)
			continue
		}
		a := owner[ev.Key]
		if a == nil {
			out = append(out, Record{At: ev.At, Err: ErrUnknown.Error()})
			continue
		}
		switch ev.Kind {
		case EvLeave:
			ds, err := a.Leave(ev.Key)
			emit(a, ds, err)
			delete(owner, ev.Key)
		case EvStat:
			d, err := a.CPU(ev.Key, ev.Stat)
			emit(a, []Decision{d}, err)
		case EvUsage:
			a.Usage(ev.Key, ev.Usage)
		case EvOOM:
			o := a.OOM(ev.Key, ev.Usage, ev.Limit, ev.Want, true)
			if o.Action == OOMReclaim {
				reclaimAll(ev.At, a, ev.Key)
				o = a.OOM(ev.Key, ev.Usage, ev.Limit, ev.Want, false)
			}
			if o.Action == OOMGrant && len(o.Reclaim) > 0 {
				reclaimAll(ev.At, a, ev.Key) // the refill after a partial grant
			}
			r := Record{At: ev.At, App: a.Name, Verdict: "denied"}
			if o.Action == OOMGrant {
				r.Verdict, r.Decision = "granted", o.Decision
			}
			out = append(out, r)
		default:
			return out, fmt.Errorf("replay: unknown event kind %q", ev.Kind)
		}
	}
	return out, nil
}
