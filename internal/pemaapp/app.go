// Package pemaapp is the multi-service app of the PEMA experiments at
// this machine's scale: demo-http containers (a frontend fanning out to
// chains) and an open-loop Poisson client that measures its latency.
// bench/cmd/bench-pema compares the policies on it; the daemon's e2e
// test of the pema policy reuses it.
package pemaapp

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// Service is one container of the app: it burns Scale × the request's ms
// and calls Next (names) in parallel.
type Service struct {
	Name  string
	Next  []string
	Scale float64
	Args  []string // more demo-http flags (e.g. -hashes-per-ms)
}

// WithArgs returns svcs with args added to every service's flags.
func WithArgs(svcs []Service, args ...string) []Service {
	out := make([]Service, len(svcs))
	for i, s := range svcs {
		s.Args = append(append([]string(nil), s.Args...), args...)
		out[i] = s
	}
	return out
}

// SixServices: front → {a1 → a2 → a3, b1 → b2}, uneven costs, so the
// distribution of CPU matters (PEMA Fig 5).
func SixServices() []Service {
	return []Service{
		{Name: "front", Next: []string{"a1", "b1"}, Scale: 0.5},
		{Name: "a1", Next: []string{"a2"}, Scale: 1},
		{Name: "a2", Next: []string{"a3"}, Scale: 0.5},
		{Name: "a3", Scale: 1.5},
		{Name: "b1", Next: []string{"b2"}, Scale: 0.3},
		{Name: "b2", Scale: 1},
	}
}

// ThreeServices: front → {a, b}.
func ThreeServices() []Service {
	return []Service{
		{Name: "front", Next: []string{"a", "b"}, Scale: 0.5},
		{Name: "a", Scale: 1},
		{Name: "b", Scale: 0.5},
	}
}

// Running is a started app.
type Running struct {
	cli   *client.Client
	IDs   []string // in service order
	Names []string // container names
	Ports map[string]int
}

// FreePorts reserves n loopback ports (closed again: the containers use
// host networking and bind them).
func FreePorts(n int) ([]int, error) {
	var out []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// AssignPorts picks a free loopback port per service.
func AssignPorts(svcs []Service) (map[string]int, error) {
	ps, err := FreePorts(len(svcs))
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for i, s := range svcs {
		out[s.Name] = ps[i]
	}
	return out, nil
}

// Start runs the services of image with host networking on ports
// (AssignPorts), each named prefix-<service>, labelled, with cpus cores
// each until the policy takes over, and waits until every one answers
// /healthz.
func Start(ctx context.Context, cli *client.Client, image, prefix string, labels map[string]string, svcs []Service, cpus float64, ports map[string]int) (*Running, error) {
	r := &Running{cli: cli, Ports: ports}
	for _, s := range svcs {
		args := append([]string{"-listen", fmt.Sprintf("127.0.0.1:%d", r.Ports[s.Name]), "-scale", fmt.Sprint(s.Scale)}, s.Args...)
		var next []string
		for _, n := range s.Next {
			p, ok := r.Ports[n]
			if !ok {
				r.Close()
				return nil, fmt.Errorf("service %s calls unknown %s", s.Name, n)
			}
			next = append(next, fmt.Sprintf("http://127.0.0.1:%d", p))
		}
		if len(next) > 0 {
			args = append(args, "-next", strings.Join(next, ","))
		}
		name := prefix + "-" + s.Name
		c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: &container.Config{Image: image, Cmd: args, Labels: labels},
			HostConfig: &container.HostConfig{NetworkMode: "host", Resources: container.Resources{
				CPUPeriod: 100000, CPUQuota: int64(cpus * 100000), Memory: 128 << 20, MemorySwap: 128 << 20}}, Name: name})
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("create %s: %w", name, err)
		}
		r.IDs = append(r.IDs, c.ID)
		r.Names = append(r.Names, name)
		if _, err := cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
			r.Close()
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range svcs {
		url := fmt.Sprintf("http://127.0.0.1:%d/healthz", r.Ports[s.Name])
		for {
			resp, err := http.Get(url)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				r.Close()
				return nil, fmt.Errorf("%s never answered /healthz", s.Name)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return r, nil
}

// Entry is the front service's host:port.
func (r *Running) Entry() string { return fmt.Sprintf("127.0.0.1:%d", r.Ports["front"]) }

// Died returns the services whose container is no longer running, each
// marked when the kernel's OOM killer ended it. A phase in which a service
// died measured a broken app, not a policy.
func (r *Running) Died(ctx context.Context) ([]string, error) {
	var out []string
	for i, id := range r.IDs {
		j, err := r.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil {
			return out, err
		}
		if j.Container.State == nil || j.Container.State.Running {
			continue
		}
		d := r.Names[i]
		if j.Container.State.OOMKilled {
			d += " (OOM-killed)"
		}
		out = append(out, d)
	}
	return out, nil
}

// Close removes the containers.
func (r *Running) Close() {
	for _, id := range r.IDs {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, _ = r.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
		cancel()
	}
}
