package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/spec"
)

// output is get's -o, --no-headers and --format.
type output struct {
	format    string // table, wide, json, yaml, name, go-template=..., jsonpath=...
	noHeaders bool
	tmpl      string   // --format: a Go template per item
	jp        []jpPart // -o jsonpath=
	sel       selector // -l: only apps (and their containers) it matches
}

func (o *output) register(c *cobra.Command) {
	c.Flags().StringVarP(&o.format, "output", "o", "table", "table|wide|json|yaml|name|go-template=TEMPLATE|jsonpath=TEMPLATE")
	c.Flags().BoolVar(&o.noHeaders, "no-headers", false, "table and wide: no header line")
	c.Flags().StringVar(&o.tmpl, "format", "", "print each item with a Go template over its JSON fields, e.g. '{{.name}} {{.status.members}}'")
	_ = c.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"table", "wide", "json", "yaml", "name", "go-template=", "jsonpath="}, cobra.ShellCompDirectiveNoFileComp
	})
}

func (o *output) check(cmd string) error {
	if t, ok := strings.CutPrefix(o.format, "jsonpath="); ok {
		jp, err := parseJSONPath(t)
		if err != nil {
			return usageErr("%s: -o jsonpath: %v", cmd, err)
		}
		if len(jp) == 0 {
			return usageErr("%s: -o jsonpath= needs a template, e.g. '{.items[*].name}'", cmd)
		}
		o.jp = jp
		return nil
	}
	if t, ok := strings.CutPrefix(o.format, "go-template="); ok {
		if o.tmpl != "" {
			return usageErr("%s: give -o go-template= or --format, not both", cmd)
		}
		o.tmpl = t
	}
	if o.tmpl != "" {
		if _, err := parseTemplate(o.tmpl); err != nil {
			return usageErr("%s: --format: %v", cmd, err)
		}
		return nil
	}
	switch o.format {
	case "table", "wide", "json", "yaml", "name":
		return nil
	}
	return usageErr("%s: -o %q: want table, wide, json, yaml, name, go-template=TEMPLATE or jsonpath=TEMPLATE", cmd, o.format)
}

func parseTemplate(s string) (*template.Template, error) {
	return template.New("format").Option("missingkey=zero").Funcs(template.FuncMap{
		"json": func(v any) (string, error) { b, err := json.Marshal(v); return string(b), err },
	}).Parse(s)
}

// items prints items as o says. kind names them for -o name; one says a
// single item was asked for (printed bare rather than as a list).
func (o *output) items(w io.Writer, kind string, items []any, names []string, one bool) error {
	if o.jp != nil {
		// Over what -o json prints: the item, or the list.
		if one && len(items) == 1 {
			return writeJSONPath(w, o.jp, items[0])
		}
		if items == nil {
			items = []any{}
		}
		return writeJSONPath(w, o.jp, items)
	}
	if o.tmpl != "" {
		t, _ := parseTemplate(o.tmpl)
		for _, it := range items {
			var m any
			b, _ := json.Marshal(it)
			_ = json.Unmarshal(b, &m)
			var buf bytes.Buffer
			if err := t.Execute(&buf, m); err != nil {
				return fmt.Errorf("--format: %v", err)
			}
			fmt.Fprintln(w, strings.TrimRight(buf.String(), "\n"))
		}
		return nil
	}
	switch o.format {
	case "name":
		for _, n := range names {
			fmt.Fprintf(w, "%s/%s\n", kind, n)
		}
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if one && len(items) == 1 {
			return enc.Encode(items[0])
		}
		if items == nil {
			items = []any{}
		}
		return enc.Encode(items)
	case "yaml":
		// One document per item: escractl apply -f - takes the stream.
		for i, it := range items {
			if i > 0 {
				fmt.Fprintln(w, "---")
			}
			b, err := toYAML(it)
			if err != nil {
				return err
			}
			w.Write(b)
		}
	}
	return nil
}

// toYAML writes typed items with their own field order (specs), others
// through their JSON form so the names are the API's.
func toYAML(v any) ([]byte, error) {
	if _, ok := v.(appItem); ok {
		return yaml.Marshal(v)
	}
	var m any
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return yaml.Marshal(m)
}

// appItem is one app as get prints it: its spec, with the field names of
// docs/spec.md, and a read-only status that apply ignores.
type appItem struct {
	spec.Doc `yaml:",inline"`
	Status   appStatus `json:"status" yaml:"status"`
}

type appStatus struct {
	Auto                 bool    `json:"auto" yaml:"auto"`
	Policy               string  `json:"policy" yaml:"policy"`
	Members              int     `json:"members" yaml:"members"`
	CPUAllocatedCores    float64 `json:"cpu_allocated_cores" yaml:"cpu_allocated_cores"`
	CPUUnallocatedCores  float64 `json:"cpu_unallocated_cores" yaml:"cpu_unallocated_cores"`
	MemoryAllocatedBytes int64   `json:"memory_allocated_bytes" yaml:"memory_allocated_bytes"`
	MemoryUnallocBytes   int64   `json:"memory_unallocated_bytes" yaml:"memory_unallocated_bytes"`
	PendingOOMs          int     `json:"pending_ooms" yaml:"pending_ooms"`
}

func itemOf(a adminclient.App) appItem {
	return appItem{Doc: liveDoc(a), Status: appStatus{Auto: a.Auto, Policy: a.Policy, Members: a.Members,
		CPUAllocatedCores: a.CPUAllocatedCores, CPUUnallocatedCores: a.CPUUnallocatedCores,
		MemoryAllocatedBytes: a.MemoryAllocatedBytes, MemoryUnallocBytes: a.MemoryUnallocatedBytes, PendingOOMs: a.PendingOOMs}}
}

func getCmd(e *env) *cobra.Command {
	var o output
	var gateway, selector string
	var watch bool
	var watchEvery time.Duration
	c := &cobra.Command{
		Use:   "get apps|containers|hosts|functions [NAME]",
		Short: "List apps, containers, hosts, or escra-gateway's functions",
		Long: `get lists what the controller knows. -o yaml and -o json print apps as
specs (docs/spec.md) with a read-only status, so the output applies back
unchanged: escractl get apps -o yaml | escractl apply -f -. For
containers, NAME is an app: its containers.`,
		Example: `  escractl get apps
  escractl get apps shop -o yaml
  escractl get containers shop -o wide
  escractl get hosts --no-headers
  escractl get apps --format '{{.name}} {{.status.members}}'
  escractl get apps -l team=web
  escractl get containers shop -w
  escractl get functions --gateway http://127.0.0.1:8088`,
		ValidArgsFunction: func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
			if len(args) == 0 {
				return []string{"apps", "containers", "hosts", "functions"}, cobra.ShellCompDirectiveNoFileComp
			}
			return completeApps(e)(cmd, args, prefix)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usageErr("get: say what to list: apps, containers or hosts")
			}
			if err := o.check("get"); err != nil {
				return err
			}
			what, name := args[0], ""
			if len(args) == 2 {
				name = args[1]
			}
			var sf selectorFlag
			if err := sf.set(selector); err != nil {
				return usageErr("get: %v", err)
			}
			o.sel = sf.sel
			if sf.given && what != "apps" && what != "app" && what != "containers" && what != "container" {
				return usageErr("get %s: -l selects apps and their containers only", what)
			}
			if watch && (what == "functions" || what == "function") {
				return usageErr("get functions: -w is not supported (escractl top --gateway URL follows them)")
			}
			if watchEvery < 100*time.Millisecond {
				return usageErr("get: --watch-interval must be at least 100ms")
			}
			if what == "functions" || what == "function" {
				// Mu's functions live in escra-gateway, not the controller.
				if o.format != "table" && o.format != "json" {
					return usageErr("get functions: -o %q: want table or json", o.format)
				}
				return getFunctions(e, gateway, o.format, name)
			}
			switch what {
			case "apps", "app":
				what = "apps"
			case "containers", "container":
				what = "containers"
			case "hosts", "host":
				what = "hosts"
			default:
				return usageErr("get: unknown kind %q (apps, containers, hosts or functions)", what)
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			if watch {
				return watchGet(e, c, what, name, &o, watchEvery)
			}
			return get(e, c, what, name, &o)
		},
	}
	o.register(c)
	c.Flags().StringVarP(&selector, "selector", "l", "", "only apps whose labels match (containers: of such apps), e.g. team=web,tier!=db")
	c.Flags().BoolVarP(&watch, "watch", "w", false, "print again whenever the answer changes, until Ctrl-C")
	c.Flags().DurationVar(&watchEvery, "watch-interval", time.Second, "-w: how often to ask the controller")
	c.Flags().StringVar(&gateway, "gateway", "", "functions: escra-gateway's admin URL (default $ESCRA_GATEWAY or http://127.0.0.1:8089)")
	return c
}

func get(e *env, c *adminclient.Client, what, name string, o *output) error {
	wide := o.format == "wide"
	switch what {
	case "apps":
		apps, err := c.Apps(e.ctx)
		if err != nil {
			return err
		}
		apps = selectApps(apps, o.sel)
		if name != "" {
			kept := apps[:0]
			for _, a := range apps {
				if a.Name == name {
					kept = append(kept, a)
				}
			}
			if len(kept) == 0 {
				return fmt.Errorf("unknown app %q", name)
			}
			apps = kept
		}
		sort.Slice(apps, func(i, j int) bool { return apps[i].Name < apps[j].Name })
		if o.format != "table" && !wide || o.tmpl != "" || o.jp != nil {
			var items []any
			var names []string
			for _, a := range apps {
				items = append(items, itemOf(a))
				names = append(names, a.Name)
			}
			return o.items(e.stdout, "app", items, names, name != "")
		}
		cs, err := c.Containers(e.ctx, name)
		if err != nil {
			return err
		}
		use := usageByApp(cs)
		head := []string{"APP", "CONTAINERS", "CPU LIMIT", "CPU ALLOC", "CPU USED", "MEM LIMIT", "MEM ALLOC", "MEM USED", "SIGMA"}
		if wide {
			head = append(head, "POLICY", "CPU LEASED", "PENDING OOMS", "SPEC", "MODE", "RECOMMENDED")
		}
		t := newTable([]int{1, 2, 3, 4, 5, 6, 7, 8, 10, 11}, head...)
		t.noHeaders = o.noHeaders
		for _, a := range apps {
			u := use[a.Name]
			n := a.Name
			if a.Auto {
				n += " (auto)"
			}
			row := []string{n, strconv.Itoa(a.Members), cores(a.CPUCores), cores(a.CPUAllocatedCores), cores(u.cpu),
				spec.FormatBytes(a.MemoryBytes), spec.FormatBytes(a.MemoryAllocatedBytes), spec.FormatBytes(u.mem),
				strconv.FormatFloat(a.Sigma, 'g', 3, 64)}
			if wide {
				sp := "-"
				if a.Spec != nil {
					sp = fmt.Sprintf("%d templates", len(a.Spec.Containers))
				}
				row = append(row, a.Policy, cores(a.CPULeasedCores), strconv.Itoa(a.PendingOOMs), sp, a.Mode, appRecommended(a, cs))
			}
			t.add(row...)
		}
		t.write(e.stdout, e.width)
	case "containers":
		cs, err := c.Containers(e.ctx, name)
		if err != nil {
			return err
		}
		if cs, err = selectContainers(e, c, cs, o.sel); err != nil {
			return err
		}
		sort.SliceStable(cs, func(i, j int) bool {
			if cs[i].App != cs[j].App {
				return cs[i].App < cs[j].App
			}
			return cs[i].Name < cs[j].Name
		})
		if o.format != "table" && !wide || o.tmpl != "" || o.jp != nil {
			var items []any
			var names []string
			for _, ct := range cs {
				items = append(items, ct)
				n := ct.Name
				if n == "" {
					n = shortID(ct.ContainerID)
				}
				names = append(names, n)
			}
			return o.items(e.stdout, "container", items, names, false)
		}
		head := []string{"CONTAINER", "NAME", "APP", "HOST", "CPU LIMIT", "CPU USED", "MEM LIMIT", "MEM USED", "THROTTLED", "OOM OK/NO"}
		if wide {
			head = append(head, "PERIODS", "THR EVENTS", "GENERATION", "HANDLE", "RECOMMENDED", "MAX")
		}
		t := newTable([]int{4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, head...)
		t.noHeaders = o.noHeaders
		for _, ct := range cs {
			id := shortID(ct.ContainerID)
			if wide {
				id = ct.ContainerID
			}
			row := []string{id, ct.Name, ct.App, ct.HostID, cores(ct.CPULimitCores()), cores(ct.CPUUsageCores()),
				spec.FormatBytes(ct.MemoryLimitBytes), spec.FormatBytes(ct.MemoryUsageBytes),
				strconv.FormatUint(ct.ThrottledPeriods, 10), fmt.Sprintf("%d/%d", ct.OOMGrants, ct.OOMDenials)}
			if wide {
				row = append(row, strconv.FormatUint(ct.Periods, 10), strconv.FormatUint(ct.ThrottleEvents, 10),
					strconv.FormatUint(ct.Generation, 10), strconv.FormatUint(uint64(ct.Handle), 10), recommended(ct), maxima(ct))
			}
			t.add(row...)
		}
		t.write(e.stdout, e.width)
	case "hosts":
		hs, err := c.Hosts(e.ctx)
		if err != nil {
			return err
		}
		if name != "" {
			kept := hs[:0]
			for _, h := range hs {
				if h.HostID == name {
					kept = append(kept, h)
				}
			}
			if len(kept) == 0 {
				return fmt.Errorf("unknown host %q", name)
			}
			hs = kept
		}
		if o.format != "table" && !wide || o.tmpl != "" || o.jp != nil {
			var items []any
			var names []string
			for _, h := range hs {
				items = append(items, h)
				names = append(names, h.HostID)
			}
			return o.items(e.stdout, "host", items, names, name != "")
		}
		head := []string{"HOST", "PEER", "BACKEND", "CONTAINERS", "CPUS", "MEMORY", "KERNEL", "CONNECTED"}
		if wide {
			head = append(head, "SESSION", "LAST SEEN")
		}
		t := newTable([]int{3, 4, 5, 8}, head...)
		t.noHeaders = o.noHeaders
		for _, h := range hs {
			row := []string{h.HostID, h.Peer, h.Backend, strconv.Itoa(h.Containers), strconv.FormatUint(uint64(h.Cores), 10),
				spec.FormatBytes(int64(h.MemoryBytes)), h.Kernel, ago(h.Since)}
			if wide {
				row = append(row, strconv.FormatUint(uint64(h.SessionID), 10), ago(h.LastSeen))
			}
			t.add(row...)
		}
		t.write(e.stdout, e.width)
	}
	return nil
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return time.Since(t).Round(time.Second).String() + " ago"
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

func describeCmd(e *env) *cobra.Command {
	var since time.Duration
	var format string
	c := &cobra.Command{
		Use:   "describe [app] NAME",
		Short: "Show one app in detail: budget, pools, allocator, containers, recent events",
		Example: `  escractl describe shop
  escractl describe app shop --events-since 10m
  escractl describe shop -o json`,
		ValidArgsFunction: completeApps(e),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 2 && (args[0] == "app" || args[0] == "apps") {
				args = args[1:]
			}
			if len(args) != 1 {
				return usageErr("describe: give one app name")
			}
			if format != "text" && format != "json" {
				return usageErr("describe: -o %q: want text or json", format)
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			if format == "json" {
				return describeJSON(e, c, args[0], since)
			}
			return describe(e, c, args[0], since)
		},
	}
	c.Flags().DurationVar(&since, "events-since", time.Hour, "show the app's events of this long ago (the controller keeps the latest ones)")
	c.Flags().StringVarP(&format, "output", "o", "text", "text, or json: the app (spec and status), its containers and events in one object")
	return c
}

func describe(e *env, c *adminclient.Client, name string, since time.Duration) error {
	a, cs, err := describeFetch(e, c, name)
	if err != nil {
		return err
	}
	w := e.stdout
	kind := "defined"
	if a.Auto {
		kind = "auto (created for a labelled container; its budget grows with its members)"
	}
	fmt.Fprintf(w, "Name:        %s\nKind:        %s\nPolicy:      %s\nMode:        %s\n", a.Name, kind, a.Policy, modeLine(*a))
	fmt.Fprintf(w, "CPU:         %s cores: %s allocated, %s unallocated, %s leased\n", cores(a.CPUCores), cores(a.CPUAllocatedCores),
		cores(a.CPUUnallocatedCores), cores(a.CPULeasedCores))
	fmt.Fprintf(w, "Memory:      %s: %s allocated, %s unallocated (σ %g withheld at bootstrap)\n", spec.FormatBytes(a.MemoryBytes),
		spec.FormatBytes(a.MemoryAllocatedBytes), spec.FormatBytes(a.MemoryUnallocatedBytes), a.Sigma)
	p := a.Params
	fmt.Fprintf(w, "Allocator:   κ %g, γ %g, Υ %g, window %d, period %s, CPU floor %s, OOM step %s, reclaim margin %s, headroom %g\n",
		p.Kappa, p.Gamma, p.Upsilon, p.Window, p.Period, cores(float64(p.CPUFloorUs)/float64(max(p.PeriodUs(), 1))),
		spec.FormatBytes(p.OOMStepBytes), spec.FormatBytes(p.SafeMarginBytes), p.Headroom)
	fmt.Fprintf(w, "Pending OOM: %d\n", a.PendingOOMs)
	if a.Spec != nil && len(a.Spec.Containers) > 0 {
		fmt.Fprintln(w, "Templates:")
		t := newTable([]int{2}, "  NAME", "IMAGE", "REPLICAS", "NETWORK", "HOST")
		for _, ct := range a.Spec.Containers {
			h := ct.Host
			if h == "" {
				h = "any"
			}
			t.add("  "+ct.Name, ct.Image, strconv.Itoa(ct.Replicas), ct.Network, h)
		}
		t.write(w, e.width)
	}
	fmt.Fprintf(w, "Containers:  %d\n", len(cs))
	if len(cs) > 0 {
		sort.Slice(cs, func(i, j int) bool { return cs[i].Name < cs[j].Name })
		t := newTable([]int{3, 4, 5, 6}, "  NAME", "HOST", "CONTAINER", "CPU LIMIT", "CPU USED", "MEM LIMIT", "MEM USED", "OOM OK/NO", "REC CPU/MEM", "MAX CPU/MEM")
		for _, ct := range cs {
			t.add("  "+ct.Name, ct.HostID, shortID(ct.ContainerID), cores(ct.CPULimitCores()), cores(ct.CPUUsageCores()),
				spec.FormatBytes(ct.MemoryLimitBytes), spec.FormatBytes(ct.MemoryUsageBytes), fmt.Sprintf("%d/%d", ct.OOMGrants, ct.OOMDenials),
				recommended(ct), maxima(ct))
		}
		t.write(w, e.width)
	}
	// Recent events, limit changes left out: they come every period.
	var evs []string
	err = c.EventsSince(e.ctx, name, since.String(), false, func(ev adminclient.Event, _ []byte) {
		if ev.Kind != "limits" && ev.Kind != "recommendation" {
			evs = append(evs, eventLine(ev))
		}
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "Events (last %s, limit changes left out):", since)
	if len(evs) == 0 {
		fmt.Fprintln(w, " none")
		return nil
	}
	fmt.Fprintln(w)
	if len(evs) > 20 {
		fmt.Fprintf(w, "  (%d earlier ones: escractl events %s --since %s --follow=false)\n", len(evs)-20, name, since)
		evs = evs[len(evs)-20:]
	}
	for _, l := range evs {
		fmt.Fprintln(w, "  "+l)
	}
	return nil
}
