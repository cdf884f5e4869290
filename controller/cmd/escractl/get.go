package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/escra-dev/escra/controller/adminclient"

	"github.com/escra-dev/escra/controller/spec"
)

func cmdGet(e *env, args []string) error {
	fs := e.flags("get")
	out := fs.String("o", "table", "")
	gw := fs.String("gateway", "", "") // functions: escra-gateway's admin URL
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) >= 1 && (pos[0] == "functions" || pos[0] == "function") && len(pos) <= 2 && (*out == "table" || *out == "json") {
		name := ""
		if len(pos) == 2 {
			name = pos[1]
		}
		return getFunctions(e, *gw, *out, name)
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usageErr("get: say what to list: apps, containers or hosts")
	}
	if *out != "table" && *out != "json" {
		return usageErr("get: -o %q: want table or json", *out)
	}
	what, app := pos[0], ""
	if len(pos) == 2 {
		app = pos[1]
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	var path string
	switch what {
	case "apps", "app":
		path = "/v1/apps"
	case "containers", "container":
		path = "/v1/containers"
	case "hosts", "host":
		path = "/v1/hosts"
	default:
		return usageErr("get: unknown kind %q (apps, containers or hosts)", what)
	}
	if *out == "json" && app == "" {
		raw, err := c.RawList(e.ctx, path)
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		if json.Indent(&buf, raw, "", "  ") != nil {
			buf.Reset()
			buf.Write(raw)
		}
		fmt.Fprintln(e.stdout, buf.String())
		return nil
	}
	switch path {
	case "/v1/apps":
		apps, err := c.Apps(e.ctx)
		if err != nil {
			return err
		}
		cs, err := c.Containers(e.ctx, app)
		if err != nil {
			return err
		}
		use := usageByApp(cs)
		if app != "" {
			kept := apps[:0]
			for _, a := range apps {
				if a.Name == app {
					kept = append(kept, a)
				}
			}
			if len(kept) == 0 {
				return fmt.Errorf("unknown app %q", app)
			}
			apps = kept
		}
		if *out == "json" {
			return writeJSON(e, apps)
		}
		t := newTable([]int{1, 2, 3, 4, 5, 6, 7, 8}, "APP", "CONTAINERS", "CPU LIMIT", "CPU ALLOC", "CPU USED", "MEM LIMIT", "MEM ALLOC", "MEM USED", "SIGMA")
		for _, a := range apps {
			u := use[a.Name]
			name := a.Name
			if a.Auto {
				name += " (auto)"
			}
			t.add(name, strconv.Itoa(a.Members), cores(a.CPUCores), cores(a.CPUAllocatedCores), cores(u.cpu),
				spec.FormatBytes(a.MemoryBytes), spec.FormatBytes(a.MemoryAllocatedBytes), spec.FormatBytes(u.mem),
				strconv.FormatFloat(a.Sigma, 'g', 3, 64))
		}
		t.write(e.stdout, e.width)
	case "/v1/containers":
		cs, err := c.Containers(e.ctx, app)
		if err != nil {
			return err
		}
		if *out == "json" {
			return writeJSON(e, cs)
		}
		t := newTable([]int{4, 5, 6, 7, 8, 9}, "CONTAINER", "NAME", "APP", "HOST", "CPU LIMIT", "CPU USED", "MEM LIMIT", "MEM USED", "THROTTLED", "OOM OK/NO")
		for _, ct := range cs {
			t.add(shortID(ct.ContainerID), ct.Name, ct.App, ct.HostID, cores(ct.CPULimitCores()), cores(ct.CPUUsageCores()),
				spec.FormatBytes(ct.MemoryLimitBytes), spec.FormatBytes(ct.MemoryUsageBytes),
				strconv.FormatUint(ct.ThrottledPeriods, 10), fmt.Sprintf("%d/%d", ct.OOMGrants, ct.OOMDenials))
		}
		t.write(e.stdout, e.width)
	case "/v1/hosts":
		hs, err := c.Hosts(e.ctx)
		if err != nil {
			return err
		}
		if *out == "json" {
			return writeJSON(e, hs)
		}
		t := newTable([]int{3, 4, 5}, "HOST", "PEER", "BACKEND", "CONTAINERS", "CPUS", "MEMORY", "KERNEL", "CONNECTED")
		for _, h := range hs {
			since := "-"
			if !h.Since.IsZero() {
				since = time.Since(h.Since).Round(time.Second).String() + " ago"
			}
			t.add(h.HostID, h.Peer, h.Backend, strconv.Itoa(h.Containers), strconv.FormatUint(uint64(h.Cores), 10),
				spec.FormatBytes(int64(h.MemoryBytes)), h.Kernel, since)
		}
		t.write(e.stdout, e.width)
	}
	return nil
}

// usage is what an app's containers use now: the controller's app rows carry
// limits and allocations, the container rows carry usage.
type appUsage struct {
	cpu         float64
	mem         int64
	grants, den uint64
	throttled   uint64
}

func usageByApp(cs []adminclient.Container) map[string]appUsage {
	m := map[string]appUsage{}
	for _, c := range cs {
		u := m[c.App]
		u.cpu += c.CPUUsageCores()
		u.mem += c.MemoryUsageBytes
		u.grants += c.OOMGrants
		u.den += c.OOMDenials
		u.throttled += c.ThrottledPeriods
		m[c.App] = u
	}
	return m
}

func writeJSON(e *env, v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
