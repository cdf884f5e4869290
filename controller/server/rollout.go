package server

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/escra-dev/escra/controller/adminapi"
	"github.com/escra-dev/escra/controller/events"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// The declarative apply of a running app: bring its containers
// to a new DeployRequest one replica at a time, like a Kubernetes rolling
// update with maxSurge 0 and maxUnavailable 1. Scale-down goes first (it
// frees budget and host room), then replacements (remove, then create
// under the same name: Docker names are unique per engine), then
// scale-up. A container whose template (image, command, env, network,
// host) did not change is never touched. The budget is kept throughout:
// every new member joins through the allocator (Escra §IV-A eq. 2),
// which takes its fair share from the others' quotas rather than exceed Ω.

// leaveTimeout bounds the wait for a removed container to leave the app.
const leaveTimeout = 20 * time.Second

// sameTemplate reports whether a and b create the same container; the
// bootstrap limits differ with the replica count and do not count (the
// allocator moves limits anyway).
func sameTemplate(a, b DeployContainer) bool {
	return a.Name == b.Name && a.Image == b.Image && a.Network == b.Network && a.Host == b.Host &&
		slices.Equal(a.Command, b.Command) && slices.Equal(a.Env, b.Env)
}

// rolloutPlan is what rollout will do, by container name.
type rolloutPlan struct {
	remove, replace []ContainerState
	create          []DeployContainer // after replace's removals: the replacements, then new names
	unchanged       []string
}

// planRollout compares the app's members with the last deployed request
// and the new one. Only names the deployer made (in last) or is asked to
// make (in req) are touched: containers an operator started with docker
// run --label escra.app=APP under other names are left alone. A running
// name whose last template is unknown (deployed before the controller
// kept it) is kept: nothing shows it differs.
func planRollout(members []ContainerState, last, req []DeployContainer) rolloutPlan {
	var p rolloutPlan
	lastBy := map[string]DeployContainer{}
	for _, c := range last {
		lastBy[c.Name] = c
	}
	want := map[string]bool{}
	for _, c := range req {
		want[c.Name] = true
	}
	running := map[string]ContainerState{}
	for _, m := range members {
		if _, dup := running[m.Name]; !dup {
			running[m.Name] = m
		}
	}
	names := make([]string, 0, len(running))
	for n := range running {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if _, ours := lastBy[n]; ours && !want[n] {
			p.remove = append(p.remove, running[n])
		}
	}
	var fresh []DeployContainer
	for _, c := range req {
		m, ok := running[c.Name]
		switch {
		case !ok:
			fresh = append(fresh, c)
		case lastBy[c.Name].Name != "" && !sameTemplate(lastBy[c.Name], c):
			p.replace = append(p.replace, m)
			p.create = append(p.create, c)
		default:
			p.unchanged = append(p.unchanged, c.Name)
		}
	}
	p.create = append(p.create, fresh...)
	return p
}

// rollout carries out planRollout one container at a time. It stops at
// the first failure; what was done stays done and is recorded, so a
// second apply continues from there.
func (s *Server) rollout(ctx context.Context, app string, req DeployRequest, members []ContainerState) ([]Placed, *adminapi.Rollout, error) {
	s.mu.RLock()
	last := slices.Clone(s.deployed[app].Containers)
	s.mu.RUnlock()
	plan := planRollout(members, last, req.Containers)
	rep := &adminapi.Rollout{Unchanged: plan.unchanged}
	// cur is the deployed record as the rollout goes: the wanted names
	// that are done, and the old entries still running.
	cur := map[string]DeployContainer{}
	for _, c := range last {
		cur[c.Name] = c
	}
	record := func() error {
		var out DeployRequest
		for _, c := range req.Containers { // the request's order first
			if d, ok := cur[c.Name]; ok {
				out.Containers = append(out.Containers, d)
				delete(cur, c.Name)
			}
		}
		for _, c := range last {
			if d, ok := cur[c.Name]; ok {
				out.Containers = append(out.Containers, d)
			}
		}
		return s.storeDeploy(app, out)
	}
	fail := func(err error) ([]Placed, *adminapi.Rollout, error) {
		if e := record(); e != nil {
			s.log.Warn("rollout: recording what was done failed", "app", app, "err", e)
		}
		return nil, rep, err
	}
	for _, m := range plan.remove {
		if err := s.removeMember(ctx, app, m); err != nil {
			return fail(err)
		}
		delete(cur, m.Name)
		rep.Removed = append(rep.Removed, m.Name)
		s.publishRollout(app, m, "removed")
	}
	replacing := map[string]bool{}
	for _, m := range plan.replace {
		replacing[m.Name] = true
	}
	for i, c := range plan.create {
		if i < len(plan.replace) {
			m := plan.replace[i]
			if err := s.removeMember(ctx, app, m); err != nil {
				return fail(err)
			}
			delete(cur, m.Name)
			s.publishRollout(app, m, "replaced")
		}
		if _, err := s.createOne(ctx, app, c); err != nil {
			if i < len(plan.replace) {
				// The new template does not start (an image missing on
				// the host, say): put the replica back as it was, so a bad
				// apply costs a restart, not a replica.
				if prev, ok := lastOf(last, c.Name); ok {
					if _, rerr := s.createOne(context.WithoutCancel(ctx), app, prev); rerr == nil {
						cur[c.Name] = prev
						return fail(fmt.Errorf("%w; %s restored with its previous template, the rollout stopped there", err, c.Name))
					}
				}
			}
			return fail(err)
		}
		cur[c.Name] = c
		if replacing[c.Name] {
			rep.Replaced = append(rep.Replaced, c.Name)
		} else {
			rep.Created = append(rep.Created, c.Name)
		}
	}
	if err := record(); err != nil {
		return nil, rep, err
	}
	var placed []Placed
	want := map[string]bool{}
	for _, c := range req.Containers {
		want[c.Name] = true
	}
	for _, m := range s.members(app) {
		if want[m.Name] {
			placed = append(placed, Placed{Name: m.Name, HostID: m.HostID, ContainerID: m.ContainerID})
		}
	}
	s.log.Info("app rolled out", "app", app, "created", len(rep.Created), "replaced", len(rep.Replaced),
		"removed", len(rep.Removed), "unchanged", len(rep.Unchanged))
	return placed, rep, nil
}

// removeMember removes one member's container on its host and waits for
// it to leave the app (its share returns to the pool).
func (s *Server) removeMember(ctx context.Context, app string, m ContainerState) error {
	h := s.hostOf(m.SessionID)
	if h == nil {
		return fmt.Errorf("container %s: its host %s is not connected", m.Name, m.HostID)
	}
	_, err := call(ctx, h.sess, &pb.Envelope{Body: &pb.Envelope_RemoveContainers{RemoveContainers: &pb.RemoveContainers{
		App: app, ContainerIds: []string{m.ContainerID}}}})
	if err != nil {
		return fmt.Errorf("remove container %s on host %s: %w", m.Name, m.HostID, err)
	}
	deadline := time.Now().Add(leaveTimeout)
	for s.isMember(app, m.ContainerID) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("container %s on host %s was removed but did not leave the app within %s", m.Name, m.HostID, leaveTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// createOne places and creates one container and waits until it registers.
func (s *Server) createOne(ctx context.Context, app string, c DeployContainer) (Placed, error) {
	// A delete during the rollout wins: nothing is created for an app
	// that is gone (its container would make an auto app).
	if !s.hasApp(app) {
		return Placed{}, fmt.Errorf("%w %q: deleted during the rollout", ErrUnknownApp, app)
	}
	plan, err := s.place(app, []DeployContainer{c})
	if err != nil {
		return Placed{}, err
	}
	p := plan[0]
	period := uint32(s.cfg.Params.PeriodUs())
	quota := int64(math.Round(c.CPUCores * float64(period)))
	if quota > 0 {
		quota = max(quota, 1000) // the kernel's smallest CFS quota
	}
	hid := p.host.hello.GetHostId()
	rep, err := call(ctx, p.host.sess, &pb.Envelope{Body: &pb.Envelope_CreateContainer{CreateContainer: &pb.CreateContainer{
		App: app, Name: c.Name, Image: c.Image, Command: c.Command, Env: c.Env, Network: c.Network,
		Limits: &pb.Limits{CpuQuotaUs: quota, CpuPeriodUs: period, MemoryLimitBytes: c.MemoryBytes}}}})
	if err != nil {
		return Placed{}, fmt.Errorf("container %s on host %s: %w", c.Name, hid, err)
	}
	id := rep.GetCreateContainerResult().GetContainerId()
	deadline := time.Now().Add(registerTimeout)
	for !s.isMember(app, id) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			// Not left half-done: the container goes again.
			rctx, cancel := context.WithTimeout(context.Background(), deployTimeout)
			_, _ = call(rctx, p.host.sess, &pb.Envelope{Body: &pb.Envelope_RemoveContainers{RemoveContainers: &pb.RemoveContainers{
				App: app, ContainerIds: []string{id}}}})
			cancel()
			return Placed{}, fmt.Errorf("container %s on host %s started but did not register with the controller within %s (see that escrad's log)",
				c.Name, hid, registerTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return Placed{Name: c.Name, HostID: hid, ContainerID: id}, nil
}

func (s *Server) isMember(app, id string) bool {
	for _, c := range s.members(app) {
		if c.ContainerID == id {
			return true
		}
	}
	return false
}

func (s *Server) hostOf(session uint32) *host {
	if v, ok := s.hosts.Load(session); ok {
		return v.(*host)
	}
	return nil
}

// publishRollout records a rollout step in the events (escractl events).
func (s *Server) publishRollout(app string, m ContainerState, reason string) {
	s.hub.Publish(events.Event{Time: time.Now(), App: app, Host: m.HostID, ContainerID: m.ContainerID,
		Handle: m.Handle, Kind: "rollout", Reason: reason + " " + m.Name})
}

func lastOf(last []DeployContainer, name string) (DeployContainer, bool) {
	for _, c := range last {
		if c.Name == name {
			return c, true
		}
	}
	return DeployContainer{}, false
}
