package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/spec"
)

func cmdEvents(e *env, args []string) error {
	fs := e.flags("events")
	out := fs.String("o", "text", "")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usageErr("events: at most one app name")
	}
	if *out != "text" && *out != "json" {
		return usageErr("events: -o %q: want text or json", *out)
	}
	app := ""
	if len(pos) == 1 {
		app = pos[0]
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	return c.Events(e.ctx, app, func(ev adminclient.Event, raw []byte) {
		if *out == "json" {
			fmt.Fprintf(e.stdout, "%s\n", raw)
			return
		}
		fmt.Fprintln(e.stdout, eventLine(ev))
	})
}

// eventLine renders one event: time, kind, where, what changed and why.
func eventLine(ev adminclient.Event) string {
	if ev.Raw != "" {
		return ev.Raw
	}
	ts := ev.Time
	if ts.IsZero() {
		ts = time.Now()
	}
	where := ev.App
	if ev.ContainerID != "" {
		where += "/" + shortID(ev.ContainerID)
	}
	if ev.Host != "" {
		where += "@" + ev.Host
	}
	var what []string
	if ev.CPUQuotaUs > 0 {
		what = append(what, fmt.Sprintf("cpu %dus/period", ev.CPUQuotaUs))
	}
	if ev.MemoryBytes > 0 {
		what = append(what, "mem "+spec.FormatBytes(ev.MemoryBytes))
	}
	if ev.Granted != nil {
		if *ev.Granted {
			what = append(what, "granted")
		} else {
			what = append(what, "denied")
		}
	}
	if ev.Reason != "" {
		what = append(what, "("+ev.Reason+")")
	}
	return fmt.Sprintf("%s  %-11s %s  %s", ts.Local().Format("15:04:05.000"), ev.Kind, where, strings.Join(what, " "))
}
