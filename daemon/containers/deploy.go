package containers

import (
	"context"
	"errors"
	"fmt"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// CreateSpec is one container the controller's deployer asks for (the Escra paper
// §IV-A, Application Deployer).
type CreateSpec struct {
	App     string
	Name    string
	Image   string
	Command []string // replaces the image's entrypoint and command
	Env     []string // KEY=VALUE
	Network string   // "none" or "host"
	Limits  Limits   // bootstrap limits (Escra §IV-A eq. 2)
	CPU     string   // escra.cpu label (WYSIWYG containers), "" for none
	Binds   []string // docker run -v mounts (the CPU view of a wysiwyg container)
}

// Validate checks what Docker would otherwise reject with a vaguer error.
func (s CreateSpec) Validate() error {
	if err := ValidateApp(s.App); err != nil {
		return err
	}
	if s.Name == "" || len(s.Name) > 128 {
		return errors.New("container name must be 1-128 characters")
	}
	if s.Image == "" {
		return errors.New("no image")
	}
	switch s.Network {
	case "", "none", "host":
	default:
		return fmt.Errorf("network %q: want none or host", s.Network)
	}
	for _, e := range s.Env {
		if !strings.Contains(e, "=") {
			return fmt.Errorf("env %q: want KEY=VALUE", e)
		}
	}
	if err := ValidateCPU(s.CPU); err != nil {
		return err
	}
	if s.Limits.MemoryBytes != 0 && s.Limits.MemoryBytes < 6<<20 {
		return fmt.Errorf("memory limit %d bytes is below Docker's 6 MiB minimum", s.Limits.MemoryBytes)
	}
	return nil
}

// Create creates and starts one container labelled escra.app=APP, so the
// Container Watcher registers it like any labelled container. A container
// that was created but did not start is removed again.
func Create(ctx context.Context, cli *client.Client, s CreateSpec) (string, error) {
	if err := s.Validate(); err != nil {
		return "", err
	}
	netMode := s.Network
	if netMode == "" {
		netMode = "none"
	}
	cfg := &container.Config{Image: s.Image, Env: s.Env, Labels: map[string]string{AppLabel: s.App}}
	if s.CPU != "" {
		cfg.Labels[CPULabel] = s.CPU
	}
	if len(s.Command) > 0 {
		// The whole argv, like a Kubernetes command: the image's
		// entrypoint and command are both replaced.
		cfg.Entrypoint = s.Command
	}
	hc := &container.HostConfig{NetworkMode: container.NetworkMode(netMode), Binds: s.Binds}
	hc.Resources.CPUQuota = s.Limits.CPUQuotaUs
	hc.Resources.CPUPeriod = int64(s.Limits.CPUPeriodUs)
	hc.Resources.Memory = s.Limits.MemoryBytes
	created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc, Name: s.Name})
	if err != nil {
		switch {
		case cerrdefs.IsNotFound(err):
			return "", &noImageError{fmt.Sprintf("image %s is not on engine %s (images are pulled only from escrad --pull-registries: load it first)", s.Image, cli.DaemonHost())}
		case cerrdefs.IsConflict(err):
			return "", fmt.Errorf("a container named %s already exists on engine %s", s.Name, cli.DaemonHost())
		}
		return "", fmt.Errorf("create %s: %w", s.Name, err)
	}
	if _, err := cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		_, _ = cli.ContainerRemove(context.WithoutCancel(ctx), created.ID, client.ContainerRemoveOptions{Force: true})
		return "", fmt.Errorf("start %s: %w", s.Name, err)
	}
	return created.ID, nil
}

// Remove force-removes app's containers: those in ids, or all labelled
// escra.app=APP when ids is empty. Only labelled containers are touched.
// It returns the ids removed; one already gone counts as removed.
func Remove(ctx context.Context, cli *client.Client, app string, ids []string) ([]string, error) {
	if err := ValidateApp(app); err != nil {
		return nil, err
	}
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", AppLabel+"="+app)})
	if err != nil {
		return nil, fmt.Errorf("list containers of %s: %w", app, err)
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var removed []string
	var errs []error
	for _, c := range list.Items {
		if len(ids) > 0 && !want[c.ID] {
			continue
		}
		_, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove %s: %w", short(c.ID), err))
			continue
		}
		removed = append(removed, c.ID)
	}
	return removed, errors.Join(errs...)
}

// ErrNoImage is what Create's error wraps when the engine lacks the image.
var ErrNoImage = errors.New("image not on engine")

type noImageError struct{ msg string }

func (e *noImageError) Error() string        { return e.msg }
func (e *noImageError) Is(target error) bool { return target == ErrNoImage }
