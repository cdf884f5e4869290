package main

import (
	"fmt"
	"time"

	"github.com/escra-dev/escra/controller/adminclient"
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
		ts := ev.Time
		if ts.IsZero() {
			ts = time.Now()
		}
		where := ev.App
		if ev.Container != "" {
			where += "/" + ev.Container
		}
		if ev.Host != "" {
			where += "@" + ev.Host
		}
		line := fmt.Sprintf("%s  %-10s %s", ts.Local().Format("15:04:05.000"), ev.Kind, where)
		if ev.Reason != "" {
			line += "  " + ev.Reason
		}
		if ev.Message != "" {
			line += "  " + ev.Message
		}
		fmt.Fprintln(e.stdout, line)
	})
}
