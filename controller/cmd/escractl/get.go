package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/escra-dev/escra/controller/spec"
)

func cmdGet(e *env, args []string) error {
	fs := e.flags("get")
	out := fs.String("o", "table", "")
	pos, err := parse(fs, args)
	if err != nil {
		return err
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
		t := newTable([]int{1, 2, 3, 4, 5, 6, 7}, "APP", "CONTAINERS", "CPU LIMIT", "CPU ALLOC", "CPU USED", "MEM LIMIT", "MEM ALLOC", "MEM USED")
		for _, a := range apps {
			t.add(a.Name, strconv.Itoa(a.Containers), cores(a.CPUCores), cores(a.CPUAllocatedCores), cores(a.CPUUsageCores),
				spec.FormatBytes(a.MemoryBytes), spec.FormatBytes(a.MemoryAllocatedBytes), spec.FormatBytes(a.MemoryUsageBytes))
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
		t := newTable([]int{5, 6, 7, 8}, "CONTAINER", "NAME", "APP", "HOST", "STATE", "CPU LIMIT", "CPU USED", "MEM LIMIT", "MEM USED")
		for _, ct := range cs {
			t.add(shortID(ct.ID), ct.Name, ct.App, ct.Host, ct.State, cores(ct.CPULimitCores), cores(ct.CPUUsageCores),
				spec.FormatBytes(ct.MemoryLimitBytes), spec.FormatBytes(ct.MemoryUsageBytes))
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
		t := newTable([]int{4, 5, 6}, "HOST", "ADDRESS", "STATE", "BACKEND", "CONTAINERS", "CPUS", "MEMORY")
		for _, h := range hs {
			t.add(h.ID, h.Addr, h.State, h.Backend, strconv.Itoa(h.Containers), cores(h.CPUCores), spec.FormatBytes(h.MemoryBytes))
		}
		t.write(e.stdout, e.width)
	}
	return nil
}

func writeJSON(e *env, v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
