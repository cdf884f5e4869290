package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/escra-dev/escra/controller/adminapi"
	placementpkg "github.com/escra-dev/escra/controller/placement"
	"github.com/escra-dev/escra/controller/session"
	"github.com/escra-dev/escra/internal/wysiwyg"
	pb "github.com/escra-dev/escra/proto/escrapb"
)

// The Application Deployer (Escra §IV-A): place an app's containers on
// the connected hosts, have each host's escrad create and start them with
// the escra.app label and their bootstrap limits, and roll everything back
// when one of them fails. Placement is the deployer profile of
// controller/placement (docs/operator.md): a host must have the free CPU and
// memory for the container's bootstrap limits; among those, the one with the
// fewest containers of this app wins, then the one holding the most bytes of
// the image's layers (dependency-aware scheduling's layer-match, docs/depsched.md), then the least
// loaded (mean free fraction of CPU and memory), then the lowest host id.

// The deploy API's bodies (controller/adminapi).
type (
	DeployContainer = adminapi.DeployContainer
	DeployRequest   = adminapi.DeployRequest
	Placed          = adminapi.Placed
)

// ErrUnknownApp is returned for an app the controller does not hold.
var ErrUnknownApp = errors.New("unknown app")

// deployTimeout bounds one create or remove on a daemon (Docker can be slow
// on a loaded host); registerTimeout bounds the wait for the watcher.
const (
	deployTimeout   = 60 * time.Second
	registerTimeout = 20 * time.Second
)

type placement struct {
	c    DeployContainer
	host *host
}

// place picks a host for every container through the deployer's
// placement profile (controller/placement), or explains why it cannot.
func (s *Server) place(app string, cs []DeployContainer) ([]placement, error) {
	st := s.Snapshot()
	byID := map[uint32]*placementpkg.Node{}
	hosts := map[uint32]*host{}
	var nodes []*placementpkg.Node
	s.hosts.Range(func(_, v any) bool {
		h := v.(*host)
		mem := int64(min(h.hello.GetMemoryBytes(), math.MaxInt64/2))
		n := &placementpkg.Node{Name: h.hello.GetHostId(), Index: int(h.id),
			CPUCap: float64(h.hello.GetCores()), CPUFree: float64(h.hello.GetCores()),
			MemCap: mem, MemFree: mem, AppCount: map[string]int{}}
		if d := h.deps.Load(); d != nil {
			n.Ext = map[string]any{placementpkg.DepsKey: d}
		}
		byID[h.id] = n
		hosts[h.id] = h
		nodes = append(nodes, n)
		return true
	})
	if len(nodes) == 0 {
		return nil, errors.New("no host is connected to the controller (start escrad on the hosts)")
	}
	sort.Slice(nodes, func(i, j int) bool {
		if a, b := nodes[i].Name, nodes[j].Name; a != b {
			return a < b
		}
		return nodes[i].Index < nodes[j].Index
	})
	for _, c := range st.Containers {
		n := byID[c.SessionID]
		if n == nil {
			continue
		}
		if c.CPUQuotaUs > 0 && c.CPUPeriodUs > 0 {
			n.CPUFree -= float64(c.CPUQuotaUs) / float64(c.CPUPeriodUs)
		}
		if c.MemoryLimitBytes > 0 {
			n.MemFree -= c.MemoryLimitBytes
		}
		n.Containers++
		n.AppCount[c.App]++
	}
	base, err := s.placementProfile()
	if err != nil {
		return nil, err
	}
	var images []string
	for _, c := range cs {
		images = append(images, c.Image)
	}
	deps := s.resolveImages(images)
	var out []placement
	for _, c := range cs {
		prof := base
		if c.CPUClass == "wysiwyg" {
			// WYSIWYG §IV-D: every candidate host simulates Algorithm 1
			// for this container; the best simulated allocation wins.
			s.askCPUPlacement(c, nodes, hosts)
			prof = placementpkg.WysiwygDeployer()
		}
		if c.Host != "" && !slices.ContainsFunc(nodes, func(n *placementpkg.Node) bool { return n.Name == c.Host }) {
			return nil, fmt.Errorf("container %s: host %q is not connected (connected: %s)", c.Name, c.Host, nodeNames(nodes))
		}
		req := &placementpkg.Request{Name: c.Name, App: app, Image: c.Image, CPU: c.CPUCores, Memory: c.MemoryBytes, Host: c.Host,
			Labels: map[string]string{placementpkg.CPULabel: c.CPUClass}, Deps: deps[c.Image]}
		res, err := prof.Schedule(req, nodes)
		if err != nil {
			return nil, fmt.Errorf("container %s: no host has %.2f free cores and %d MiB free memory for it (%s)",
				c.Name, c.CPUCores, c.MemoryBytes>>20, reasons(res.Rejected, nodes))
		}
		placementpkg.Assume(req, res.Node)
		out = append(out, placement{c: c, host: hosts[uint32(res.Node.Index)]})
	}
	return out, nil
}

// askCPUPlacement asks every host's escrad to simulate c's allocation
// (CpuPlacementQuery) and stores the answers in the nodes. A host that does
// not answer within a second (an escrad without CPU placement) gets no
// answer: the plugins then leave it to the other scores. Containers placed
// earlier in the same deploy are not yet on the hosts, so their
// allocations are not in the answers.
func (s *Server) askCPUPlacement(c DeployContainer, nodes []*placementpkg.Node, hosts map[uint32]*host) {
	milli := uint32(math.Ceil(c.CPUCores*1000 - 1e-6))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, n := range nodes {
		h := hosts[uint32(n.Index)]
		if n.Ext == nil {
			n.Ext = map[string]any{}
		}
		delete(n.Ext, placementpkg.WysiwygAnswerExt)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			rep, err := call(ctx, h.sess, &pb.Envelope{Body: &pb.Envelope_CpuPlacementQuery{CpuPlacementQuery: &pb.CpuPlacementQuery{Millicores: milli, Wysiwyg: true}}})
			a := rep.GetCpuPlacementAnswer()
			if err != nil || a == nil || !a.GetEnabled() {
				return
			}
			ans := placementpkg.WysiwygAnswer{}
			switch {
			case a.GetNotWysiwyg():
				ans.Err = fmt.Errorf("%w (%s)", wysiwyg.ErrNotWYSIWYG, a.GetRefused())
			case a.GetRefused() != "":
				ans.Err = errors.New(a.GetRefused())
			default:
				ans.Alloc = wysiwyg.Alloc{Class: wysiwyg.C1, R: int64(milli)}
				ans.Alloc.P2 = map[int]int64{}
				if sh := int64(a.GetSharedMillicores()); sh > 0 {
					ans.Alloc.P2[-1] = sh // the host's own cores; only the amount matters here
				}
			}
			mu.Lock()
			n.Ext[placementpkg.WysiwygAnswerExt] = ans
			mu.Unlock()
		}()
	}
	wg.Wait()
}

func nodeNames(ns []*placementpkg.Node) string {
	var b []string
	for _, n := range ns {
		b = append(b, n.Name)
	}
	return strings.Join(b, ", ")
}

// reasons lists every host's rejection, in host order.
func reasons(rej map[string]string, ns []*placementpkg.Node) string {
	var b []string
	for _, n := range ns {
		if why, ok := rej[n.Name]; ok {
			b = append(b, n.Name+": "+why)
		}
	}
	return strings.Join(b, "; ")
}

func (s *Server) hasApp(name string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.apps[name] != nil
}

func (s *Server) members(app string) []ContainerState {
	var out []ContainerState
	for _, c := range s.Snapshot().Containers {
		if c.App == app {
			out = append(out, c)
		}
	}
	return out
}

// call runs one deployer RPC on a session and waits for its reply.
func call(ctx context.Context, ss *session.Session, env *pb.Envelope) (*pb.Envelope, error) {
	type res struct {
		env *pb.Envelope
		err error
	}
	ch := make(chan res, 1)
	ss.Call(env, deployTimeout, func(e *pb.Envelope, err error) { ch <- res{e, err} })
	select {
	case r := <-ch:
		return r.env, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Deploy creates an app's containers across the hosts (Escra §IV-A).
// For an app without containers it is all or nothing: on any failure every
// container of the app is removed again and the error says what failed.
// An app that runs containers is rolled out to req instead (rollout.go).
func (s *Server) Deploy(ctx context.Context, app string, req DeployRequest) ([]Placed, error) {
	placed, _, err := s.DeployOrRollout(ctx, app, req)
	return placed, err
}

// DeployOrRollout is Deploy, also saying what a rollout changed (nil for
// a fresh deploy).
func (s *Server) DeployOrRollout(ctx context.Context, app string, req DeployRequest) ([]Placed, *adminapi.Rollout, error) {
	if !s.hasApp(app) {
		return nil, nil, fmt.Errorf("%w %q: define its budget first", ErrUnknownApp, app)
	}
	if len(req.Containers) == 0 {
		return nil, nil, errors.New("no containers to deploy")
	}
	seen := map[string]bool{}
	for _, c := range req.Containers {
		if c.Name == "" || seen[c.Name] {
			return nil, nil, fmt.Errorf("container name %q is empty or given twice", c.Name)
		}
		seen[c.Name] = true
	}
	s.rollMu.Lock()
	defer s.rollMu.Unlock()
	if ms := s.members(app); len(ms) > 0 {
		return s.rollout(ctx, app, req, ms)
	}
	placed, err := s.deployFresh(ctx, app, req)
	return placed, nil, err
}

func (s *Server) deployFresh(ctx context.Context, app string, req DeployRequest) ([]Placed, error) {
	plan, err := s.place(app, req.Containers)
	if err != nil {
		return nil, err
	}
	placed, err := s.createPlanned(ctx, app, plan)
	if err != nil {
		s.rollback(app, plan)
		return nil, firstLine(err)
	}
	// Registered: the watcher on each host saw its container start.
	deadline := time.Now().Add(registerTimeout)
	for {
		reg := map[string]bool{}
		for _, c := range s.members(app) {
			reg[c.ContainerID] = true
		}
		var missing *Placed
		for i := range placed {
			if !reg[placed[i].ContainerID] {
				missing = &placed[i]
				break
			}
		}
		if missing == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.rollback(app, plan)
			return nil, fmt.Errorf("container %s on host %s started but did not register with the controller within %s (see that escrad's log)",
				missing.Name, missing.HostID, registerTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.log.Info("app deployed", "app", app, "containers", len(placed))
	return placed, s.storeDeploy(app, req)
}

// firstLine joins a joined error's problems into one line, every one
// of them listed ("; "), so the API's one-line error keeps them all.
func firstLine(err error) error {
	lines := strings.Split(err.Error(), "\n")
	if len(lines) == 1 {
		return err
	}
	return fmt.Errorf("%d problems: %s", len(lines), strings.Join(lines, "; "))
}

// rollback removes every container of app on the hosts a plan touched.
func (s *Server) rollback(app string, plan []placement) {
	hosts := map[uint32]*host{}
	for _, p := range plan {
		hosts[p.host.id] = p.host
	}
	ctx, cancel := context.WithTimeout(context.Background(), deployTimeout)
	defer cancel()
	for _, err := range s.removeOn(ctx, app, hosts) {
		s.log.Warn("rollback: removing containers failed", "app", app, "err", err)
	}
}

// removeOn asks each host to remove app's containers, in parallel.
func (s *Server) removeOn(ctx context.Context, app string, hosts map[uint32]*host) []error {
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := call(ctx, h.sess, &pb.Envelope{Body: &pb.Envelope_RemoveContainers{RemoveContainers: &pb.RemoveContainers{App: app}}})
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("host %s: %w", h.hello.GetHostId(), err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

// RemoveApp removes the app's containers on every connected host, waits
// for them to leave, and forgets the app. It fails with ErrUnknownApp for
// an app the controller does not hold. The record is deleted first: a
// store that refuses leaves the app and its containers as they were.
func (s *Server) RemoveApp(ctx context.Context, app string) (int, error) {
	if !s.hasApp(app) {
		return 0, fmt.Errorf("%w %q", ErrUnknownApp, app)
	}
	if err := s.storeDelete(app); err != nil {
		return 0, err
	}
	n := len(s.members(app))
	hosts := map[uint32]*host{}
	s.hosts.Range(func(_, v any) bool { h := v.(*host); hosts[h.id] = h; return true })
	if errs := s.removeOn(ctx, app, hosts); len(errs) > 0 {
		return 0, firstLine(errors.Join(errs...))
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(s.members(app)) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	s.mu.Lock()
	a := s.apps[app]
	delete(s.apps, app)
	delete(s.docs, app)
	delete(s.deployed, app)
	s.mu.Unlock()
	if a == nil {
		return n, nil
	}
	// Members that did not leave (a host that went away) are dropped here.
	s.hosts.Range(func(_, v any) bool {
		h := v.(*host)
		h.mu.Lock()
		h.cont.each(func(k uint32, r ref) {
			if r.app == a {
				h.cont.del(k)
				s.releaseID(h.id, r.id)
			}
		})
		h.mu.Unlock()
		return true
	})
	a.Stop()
	s.log.Info("app deleted", "app", app, "containers", n)
	return n, nil
}

// createPlanned has each planned container created by its host's escrad,
// all at once, with its bootstrap limits. placed[i] is set for every
// container that was created, also when others failed (the caller undoes).
func (s *Server) createPlanned(ctx context.Context, app string, plan []placement) ([]Placed, error) {
	period := uint32(s.cfg.Params.PeriodUs())
	placed := make([]Placed, len(plan))
	errs := make([]error, len(plan))
	var wg sync.WaitGroup
	for i, p := range plan {
		wg.Add(1)
		go func() {
			defer wg.Done()
			quota := int64(math.Round(p.c.CPUCores * float64(period)))
			if quota > 0 {
				quota = max(quota, 1000) // the kernel's smallest CFS quota
			}
			env := &pb.Envelope{Body: &pb.Envelope_CreateContainer{CreateContainer: &pb.CreateContainer{
				App: app, Name: p.c.Name, Image: p.c.Image, Command: p.c.Command, Env: p.c.Env, Network: p.c.Network, Cpu: p.c.CPUClass,
				Limits: &pb.Limits{CpuQuotaUs: quota, CpuPeriodUs: period, MemoryLimitBytes: p.c.MemoryBytes}}}}
			rep, err := call(ctx, p.host.sess, env)
			hid := p.host.hello.GetHostId()
			if err != nil {
				errs[i] = fmt.Errorf("container %s on host %s: %w", p.c.Name, hid, err)
				return
			}
			cr := rep.GetCreateContainerResult()
			placed[i] = Placed{Name: p.c.Name, HostID: hid, ContainerID: cr.GetContainerId(), PullMs: float64(cr.GetPullUs()) / 1e3}
		}()
	}
	wg.Wait()
	return placed, errors.Join(errs...)
}
