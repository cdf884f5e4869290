package gateway

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/placement"
)

// Replica is one running replica: its queue proxy's address.
type Replica struct {
	ID   string // container name
	Addr string // host:port of the queue proxy
}

// Scaler creates and removes replicas (ControllerScaler: through the Escra
// controller's deployer and escrad).
type Scaler interface {
	// Ceiling is the most replicas the function's app budget allows.
	Ceiling(ctx context.Context, f *Function) (int, error)
	// Nodes is the cluster as placement sees it, for DRF across functions.
	Nodes(ctx context.Context) ([]*placement.Node, error)
	// Add creates one replica on host, the node Mu's placement chose for
	// it; "" leaves the choice to the controller's deployer.
	Add(ctx context.Context, f *Function, host string) (Replica, error)
	Remove(ctx context.Context, f *Function, id string) error
}

// ControllerScaler adds and removes replicas through the Escra controller
// (POST/DELETE /v1/apps/{fn}/containers → deployer placement → escrad →
// Docker), so each replica carries escra.app=<function> and joins the
// function's Distributed Container. Each function must be defined as an
// app (its budget) before the gateway starts; the budget is the ceiling.
// Replicas run with host networking on 127.0.0.1 ports from BasePort up.
type ControllerScaler struct {
	Client *adminclient.Client
	// Prefix names the containers <Prefix><function>-<queue proxy port>,
	// which is how a restarted gateway finds their address (Existing).
	Prefix   string
	BasePort int
	// ProxyPath is the queue proxy inside the image.
	ProxyPath string

	mu   sync.Mutex
	next int
	used map[int]bool // queue proxy ports of adopted replicas
}

// Ceiling is ⌊budget / per-replica bootstrap⌋ on CPU and memory.
func (s *ControllerScaler) Ceiling(ctx context.Context, f *Function) (int, error) {
	apps, err := s.Client.Apps(ctx)
	if err != nil {
		return 0, err
	}
	for _, a := range apps {
		if a.Name == f.Name {
			n := math.Floor(a.CPUCores/f.CPUCores + 1e-9)
			if a.MemoryBytes > 0 {
				n = min(n, math.Floor(float64(a.MemoryBytes)/float64(f.MemoryBytes)))
			}
			return int(max(n, 0)), nil
		}
	}
	return 0, fmt.Errorf("function %s has no app budget on the controller (escractl apply it first)", f.Name)
}

// Nodes builds placement nodes from the controller's hosts and the
// bootstrap limits of the containers on them.
func (s *ControllerScaler) Nodes(ctx context.Context) ([]*placement.Node, error) {
	hosts, err := s.Client.Hosts(ctx)
	if err != nil {
		return nil, err
	}
	cs, err := s.Client.Containers(ctx, "")
	if err != nil {
		return nil, err
	}
	by := map[uint32]*placement.Node{}
	var out []*placement.Node
	for _, h := range hosts {
		mem := int64(min(h.MemoryBytes, math.MaxInt64/2))
		n := &placement.Node{Name: h.HostID, Index: int(h.SessionID), CPUCap: float64(h.Cores), CPUFree: float64(h.Cores),
			MemCap: mem, MemFree: mem, AppCount: map[string]int{}}
		by[h.SessionID] = n
		out = append(out, n)
	}
	for _, c := range cs {
		if n := by[c.SessionID]; n != nil {
			n.CPUFree -= c.CPULimitCores()
			n.MemFree -= c.MemoryLimitBytes
			n.Containers++
			n.AppCount[c.App]++
		}
	}
	return out, nil
}

func (s *ControllerScaler) ports() (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		p := s.BasePort + 2*s.next
		s.next++
		if !s.used[p] {
			return p, p + 1
		}
	}
}

// Existing lists the function's replicas on the controller by their names
// (<Prefix><function>-<port>); their ports are not handed out again. A
// name with our prefix whose suffix is not a port of ours (an older
// gateway's <n>) comes back without an address, to be removed.
func (s *ControllerScaler) Existing(ctx context.Context, f *Function) ([]Replica, error) {
	cs, err := s.Client.Containers(ctx, f.Name)
	if err != nil {
		return nil, err
	}
	pre := s.Prefix + f.Name + "-"
	var out []Replica
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range cs {
		suf, ok := strings.CutPrefix(c.Name, pre)
		if !ok {
			continue // not a replica of this gateway's: leave it alone
		}
		p, err := strconv.Atoi(suf)
		if err != nil {
			continue
		}
		if p < s.BasePort || p > 65534 || (p-s.BasePort)%2 != 0 {
			out = append(out, Replica{ID: c.Name})
			continue
		}
		if s.used == nil {
			s.used = map[int]bool{}
		}
		s.used[p] = true
		out = append(out, Replica{ID: c.Name, Addr: "127.0.0.1:" + suf})
	}
	return out, nil
}

// Add creates one replica: the queue proxy as the entrypoint with the
// function's server as its child, listening on the next port pair, pinned
// to host when one is given (the controller refuses a host that is not
// connected or has no room, and the gateway counts that as a failed add).
func (s *ControllerScaler) Add(ctx context.Context, f *Function, host string) (Replica, error) {
	qp, fp := s.ports()
	name := s.Prefix + f.Name + "-" + strconv.Itoa(qp)
	fport := strconv.Itoa(fp)
	cmd := []string{s.ProxyPath, "-listen", "127.0.0.1:" + strconv.Itoa(qp), "-upstream", "http://127.0.0.1:" + fport,
		"-concurrency", strconv.Itoa(f.Concurrency), "-max-queue", strconv.Itoa(max(f.MaxQueue, 1)), "--"}
	for _, a := range f.Command {
		cmd = append(cmd, strings.ReplaceAll(a, "{port}", fport))
	}
	_, err := s.Client.ScaleOut(ctx, f.Name, []adminclient.DeployContainer{{
		Name: name, Image: f.Image, Command: cmd, Network: "host", CPUCores: f.CPUCores, MemoryBytes: f.MemoryBytes, Host: host}})
	if err != nil {
		return Replica{}, err
	}
	return Replica{ID: name, Addr: "127.0.0.1:" + strconv.Itoa(qp)}, nil
}

// Remove removes one replica's container.
func (s *ControllerScaler) Remove(ctx context.Context, f *Function, id string) error {
	return s.Client.ScaleIn(ctx, f.Name, id)
}

// StaticScaler hands out a fixed replica set (the load-balancer
// comparison: every policy on the same replicas); with MinReplicas =
// MaxReplicas = len(Replicas) the gateway adds them all and never removes.
type StaticScaler struct {
	Replicas []Replica
	mu       sync.Mutex
	given    int
}

func (s *StaticScaler) Ceiling(context.Context, *Function) (int, error) { return len(s.Replicas), nil }

func (s *StaticScaler) Nodes(context.Context) ([]*placement.Node, error) { return nil, nil }

func (s *StaticScaler) Add(context.Context, *Function, string) (Replica, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.given >= len(s.Replicas) {
		return Replica{}, fmt.Errorf("static replica set exhausted (%d)", len(s.Replicas))
	}
	s.given++
	return s.Replicas[s.given-1], nil
}

func (s *StaticScaler) Remove(context.Context, *Function, string) error { return nil }
