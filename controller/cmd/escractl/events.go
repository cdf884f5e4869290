package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/spec"
)

func eventsCmd(e *env) *cobra.Command {
	var out, since string
	follow := true
	c := &cobra.Command{
		Use:   "events [APP]",
		Short: "Limit changes, OOM verdicts, reclaims, joins, leaves and rollouts, as they happen",
		Long: `events streams the controller's decisions. --since first replays the ones
the controller kept (the latest 10000 limit changes and 10000 other events,
by default: escra-controller --events-history).`,
		Example: `  escractl events shop
  escractl events --since 10m --follow=false
  escractl events --since 2026-11-25T12:00:00Z -o json`,
		Args:              maxArgs(1, "one app name"),
		ValidArgsFunction: completeApps(e),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out != "text" && out != "json" {
				return usageErr("events: -o %q: want text or json", out)
			}
			if since != "" {
				if d, err := time.ParseDuration(since); err != nil || d < 0 {
					if _, err := time.Parse(time.RFC3339Nano, since); err != nil {
						return usageErr("events: --since %q: want a duration (10m) or an RFC 3339 time", since)
					}
				}
			}
			if !follow && since == "" {
				return usageErr("events: --follow=false needs --since")
			}
			app := ""
			if len(args) == 1 {
				app = args[0]
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			return c.EventsSince(e.ctx, app, since, follow, func(ev adminclient.Event, raw []byte) {
				if out == "json" {
					fmt.Fprintf(e.stdout, "%s\n", raw)
					return
				}
				fmt.Fprintln(e.stdout, eventLine(ev))
			})
		},
	}
	c.Flags().StringVarP(&out, "output", "o", "text", "text|json (one JSON object a line)")
	c.Flags().StringVar(&since, "since", "", "first replay the kept events of this long ago (10m) or since this RFC 3339 time")
	c.Flags().BoolVarP(&follow, "follow", "w", true, "keep streaming new events (--follow=false: replay and exit)")
	return c
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
	return strings.TrimRight(fmt.Sprintf("%s  %-11s %s  %s", ts.Local().Format("15:04:05.000"), ev.Kind, where, strings.Join(what, " ")), " ")
}
