package main

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/spec"
)

// topState remembers the last frame's cumulative throttle counts, so each
// frame shows throttled periods per second.
type topState struct {
	last     map[string]uint64
	lastTime time.Time
}

func topCmd(e *env) *cobra.Command {
	var once bool
	var interval time.Duration
	var gateway, format string
	c := &cobra.Command{
		Use:   "top [APP|FUNCTION]",
		Short: "Live table of limits, usage and slack per container and app",
		Example: `  escractl top
  escractl top shop --once
  escractl top --interval 500ms
  escractl top shop -o json --once
  escractl top --gateway http://127.0.0.1:8089`,
		Args:              maxArgs(1, "one app name"),
		ValidArgsFunction: completeApps(e),
		RunE: func(cmd *cobra.Command, args []string) error {
			if interval < 100*time.Millisecond {
				return usageErr("top: --interval must be at least 100ms")
			}
			if format != "table" && format != "json" {
				return usageErr("top: -o %q: want table or json", format)
			}
			app := ""
			if len(args) == 1 {
				app = args[0]
			}
			if gateway != "" {
				// escra-gateway's functions: replicas, queue, capacity, predicted rate.
				if format == "json" {
					return usageErr("top --gateway: -o json is not supported (escractl get functions -o json)")
				}
				return topFunctions(e, gateway, app, once, interval)
			}
			return runTop(e, app, once, interval, format == "json")
		},
	}
	c.Flags().BoolVar(&once, "once", false, "print one frame and exit")
	c.Flags().DurationVar(&interval, "interval", time.Second, "time between frames")
	c.Flags().StringVar(&gateway, "gateway", "", "show escra-gateway's functions (URL) instead of the controller's apps")
	c.Flags().StringVarP(&format, "output", "o", "table", "table, or json: one JSON object a frame, one a line")
	return c
}

func runTop(e *env, app string, once bool, interval time.Duration, asJSON bool) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	st := &topState{last: map[string]uint64{}}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if e.term != nil {
			if w, ok := terminalWidth(e.term); ok {
				e.width = w // follow a resized terminal
			}
		}
		var frame bytes.Buffer
		draw := st.frame
		if asJSON {
			draw = st.frameJSON
		}
		if err := draw(e, c, app, &frame); err != nil {
			if e.ctx.Err() != nil {
				return nil // Ctrl-C during a request: a clean end, not an error
			}
			return err
		}
		if e.tty && !once && !asJSON {
			io.WriteString(e.stdout, "\x1b[H\x1b[2J") // home, clear: redraw in place
		}
		e.stdout.Write(frame.Bytes())
		if once {
			return nil
		}
		if !e.tty && !asJSON {
			fmt.Fprintln(e.stdout)
		}
		select {
		case <-e.ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (st *topState) frame(e *env, c *adminclient.Client, app string, w io.Writer) error {
	apps, cs, err := topFetch(e, c, app)
	if err != nil {
		return err
	}
	now := time.Now()
	head := fmt.Sprintf("escractl top  %s  %s  %d apps, %d containers", c.URL(), now.Format("15:04:05"), len(apps), len(cs))
	if e.width > 0 && len(head) > e.width {
		head = head[:e.width]
	}
	fmt.Fprintf(w, "%s\n\n", head)

	cols := []string{"CONTAINER", "APP", "HOST", "CPU LIM", "CPU USE", "CPU SLACK", "THR/s", "MEM LIM", "MEM USE", "MEM SLACK", "OOM OK", "OOM NO"}
	rec := anyRecommended(cs) // an app in recommend mode: what Escra would set
	if rec {
		cols = append(cols, "REC CPU/MEM")
	}
	t := newTable([]int{3, 4, 5, 6, 7, 8, 9, 10, 11}, cols...)
	dt := now.Sub(st.lastTime).Seconds()
	next := make(map[string]uint64, len(cs))
	for _, ct := range cs {
		key := ct.HostID + "/" + ct.ContainerID
		next[key] = ct.ThrottledPeriods
		thr := "-"
		if prev, ok := st.last[key]; ok && dt > 0 && ct.ThrottledPeriods >= prev {
			thr = strconv.FormatFloat(float64(ct.ThrottledPeriods-prev)/dt, 'f', 1, 64)
		}
		name := ct.Name
		if name == "" {
			name = shortID(ct.ContainerID)
		}
		row := []string{name, ct.App, ct.HostID,
			cores(ct.CPULimitCores()), cores(ct.CPUUsageCores()), cores(ct.CPULimitCores() - ct.CPUUsageCores()), thr,
			spec.FormatBytes(ct.MemoryLimitBytes), spec.FormatBytes(ct.MemoryUsageBytes), spec.FormatBytes(ct.MemoryLimitBytes - ct.MemoryUsageBytes),
			strconv.FormatUint(ct.OOMGrants, 10), strconv.FormatUint(ct.OOMDenials, 10)}
		if rec {
			row = append(row, recommended(ct))
		}
		t.add(row...)
	}
	st.last, st.lastTime = next, now
	t.write(w, e.width)
	fmt.Fprintln(w)

	// Per-app totals against the global limits (the Distributed Container's pool).
	at := newTable([]int{1, 2, 3, 4, 5, 6, 7, 8, 9},
		"APP", "CPU ALLOC", "/ LIMIT", "CPU USE", "CPU SLACK", "MEM ALLOC", "/ LIMIT", "MEM USE", "OOM OK", "OOM NO")
	use := usageByApp(cs)
	for _, a := range apps {
		u := use[a.Name]
		at.add(a.Name,
			cores(a.CPUAllocatedCores)+" "+pct(a.CPUAllocatedCores, a.CPUCores), cores(a.CPUCores),
			cores(u.cpu), cores(a.CPUAllocatedCores-u.cpu),
			spec.FormatBytes(a.MemoryAllocatedBytes)+" "+pct(float64(a.MemoryAllocatedBytes), float64(a.MemoryBytes)), spec.FormatBytes(a.MemoryBytes),
			spec.FormatBytes(u.mem),
			strconv.FormatUint(u.grants, 10), strconv.FormatUint(u.den, 10))
	}
	at.write(w, e.width)
	return nil
}

// topFetch reads one frame's apps (only app, when named) and containers,
// sorted by app, host and name: the table and -o json show the same.
func topFetch(e *env, c *adminclient.Client, app string) ([]adminclient.App, []adminclient.Container, error) {
	apps, err := c.Apps(e.ctx)
	if err != nil {
		return nil, nil, err
	}
	if app != "" {
		kept := apps[:0]
		for _, a := range apps {
			if a.Name == app {
				kept = append(kept, a)
			}
		}
		if len(kept) == 0 {
			return nil, nil, fmt.Errorf("unknown app %q", app)
		}
		apps = kept
	}
	cs, err := c.Containers(e.ctx, app)
	if err != nil {
		return nil, nil, err
	}
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].App != cs[j].App {
			return cs[i].App < cs[j].App
		}
		if cs[i].HostID != cs[j].HostID {
			return cs[i].HostID < cs[j].HostID
		}
		return cs[i].Name < cs[j].Name
	})
	return apps, cs, nil
}
