package containers

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"
)

// Docker watches one engine. After the engine goes away (restart, crash)
// it reconnects with backoff, relists and sends Synced so that containers
// that died meanwhile are dropped.
type Docker struct {
	Client *client.Client
	Log    *slog.Logger
}

// NewDockerClient connects to host ("" = DOCKER_HOST or the default socket)
// with API version negotiation (the client's default), so Debian's 20.10
// engine works.
func NewDockerClient(host string) (*client.Client, error) {
	opts := []client.Opt{client.FromEnv}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	return client.New(opts...)
}

// Run lists and watches until ctx ends.
func (d *Docker) Run(ctx context.Context, out chan<- Event) error {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		connected, err := d.session(ctx, out)
		if ctx.Err() != nil {
			return nil
		}
		if connected {
			backoff = 100 * time.Millisecond
		}
		d.Log.Warn("docker engine unavailable; retrying", "err", err, "in", backoff)
		sleep := backoff/2 + time.Duration(rand.Int64N(int64(backoff)))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(sleep):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
	return nil
}

// session subscribes first, then lists, so nothing falls between the two;
// it returns when the event stream fails.
func (d *Docker) session(ctx context.Context, out chan<- Event) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, err := d.Client.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return false, err
	}
	f := make(client.Filters).Add("type", "container").Add("label", AppLabel)
	f.Add("event", "start", "die", "destroy", "update", "create")
	evs := d.Client.Events(ctx, client.EventsListOptions{Filters: f})
	msgs, errs := evs.Messages, evs.Err

	list, err := d.Client.ContainerList(ctx, client.ContainerListOptions{
		Filters: make(client.Filters).Add("label", AppLabel).Add("status", "running"),
	})
	if err != nil {
		return false, err
	}
	live := make(map[string]bool, len(list.Items))
	for _, s := range list.Items {
		if c, ok := d.inspect(ctx, s.ID); ok {
			live[c.ID] = true
			if !send(ctx, out, Event{Kind: Started, Container: c}) {
				return true, nil
			}
		}
	}
	if !send(ctx, out, Event{Kind: Synced, Live: live}) {
		return true, nil
	}
	d.Log.Info("watching docker engine", "host", d.Client.DaemonHost(), "api", d.Client.ClientVersion(), "managed", len(live))
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case err := <-errs:
			return true, err
		case m := <-msgs:
			var ev Event
			switch m.Action {
			case events.ActionStart:
				c, ok := d.inspect(ctx, m.Actor.ID)
				if !ok {
					continue
				}
				ev = Event{Kind: Started, Container: c}
			case events.ActionDie, events.ActionDestroy:
				ev = Event{Kind: Stopped, ID: m.Actor.ID}
			default: // create: no cgroup yet; update: our own reconcile or a user's
				d.Log.Debug("docker event", "action", m.Action, "id", short(m.Actor.ID))
				continue
			}
			if !send(ctx, out, ev) {
				return true, nil
			}
		}
	}
}

func send(ctx context.Context, out chan<- Event, ev Event) bool {
	select {
	case out <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// inspect turns a running labelled container into a Container; anything
// unusable (vanished, bad label, not running) is skipped with one log line.
func (d *Docker) inspect(ctx context.Context, id string) (Container, bool) {
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := d.Client.ContainerInspect(ictx, id, client.ContainerInspectOptions{})
	if err != nil {
		d.Log.Info("skipping container: inspect failed", "id", short(id), "err", err)
		return Container{}, false
	}
	j := res.Container
	if j.Config == nil || j.State == nil || j.HostConfig == nil {
		d.Log.Info("skipping container: incomplete inspect", "id", short(id))
		return Container{}, false
	}
	app, ok := j.Config.Labels[AppLabel]
	if !ok {
		return Container{}, false
	}
	if err := ValidateApp(app); err != nil {
		d.Log.Warn("skipping container: bad label", "id", short(id), "name", j.Name, "err", err)
		return Container{}, false
	}
	cpu := j.Config.Labels[CPULabel]
	if err := ValidateCPU(cpu); err != nil {
		d.Log.Warn("escra.cpu label ignored: container placed as shared", "id", short(id), "name", j.Name, "err", err)
		cpu = CPUShared
	}
	if !j.State.Running || j.State.Pid <= 0 {
		d.Log.Debug("skipping container: not running", "id", short(id))
		return Container{}, false
	}
	r := j.HostConfig.Resources
	name := j.Name
	if len(name) > 0 && name[0] == '/' {
		name = name[1:]
	}
	return Container{
		ID: j.ID, Name: name, App: app, CPU: cpu, Image: j.Image, Pid: j.State.Pid, Docker: true,
		Limits: Limits{
			CPUQuotaUs: r.CPUQuota, CPUPeriodUs: uint32(r.CPUPeriod),
			MemoryBytes: r.Memory, MemswBytes: r.MemorySwap, CpusetCpus: r.CpusetCpus, NanoCPUs: r.NanoCPUs,
		},
	}, true
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
