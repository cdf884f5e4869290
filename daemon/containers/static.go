package containers

import (
	"context"
	"fmt"
	"path/filepath"
)

// CgroupSpec names a plain cgroup to manage as a member of App, for
// workloads that Docker does not run (processes, VMs).
type CgroupSpec struct {
	Name string `yaml:"name"`
	App  string `yaml:"app"`
	// Path relative to the cgroup hierarchy root, e.g. "/escra/vm1".
	Path string `yaml:"path"`
}

// Static reports a fixed list of cgroups once and then waits.
type Static struct{ Specs []CgroupSpec }

// Validate checks every spec; the daemon refuses to start on a bad one.
func (s Static) Validate() error {
	for i, c := range s.Specs {
		if err := ValidateApp(c.App); err != nil {
			return fmt.Errorf("cgroups[%d] (%s): %w", i, c.Path, err)
		}
		if c.Path == "" || !filepath.IsAbs(c.Path) || filepath.Clean(c.Path) != c.Path || c.Path == "/" {
			return fmt.Errorf("cgroups[%d]: path %q must be an absolute, clean path below the root", i, c.Path)
		}
	}
	return nil
}

// Run sends Started for each spec (the agent skips those whose cgroup does
// not exist, with a log line).
func (s Static) Run(ctx context.Context, out chan<- Event) error {
	live := map[string]bool{}
	for _, c := range s.Specs {
		name := c.Name
		if name == "" {
			name = filepath.Base(c.Path)
		}
		ct := Container{ID: "cgroup:" + c.Path, Name: name, App: c.App, CgroupPath: c.Path}
		live[ct.ID] = true
		if !send(ctx, out, Event{Kind: Started, Container: ct}) {
			return nil
		}
	}
	<-ctx.Done()
	return nil
}
