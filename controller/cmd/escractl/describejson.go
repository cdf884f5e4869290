package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/escra-dev/escra/controller/adminclient"
)

// described is describe -o json: what describe prints, as data.
type described struct {
	App        appItem                 `json:"app"`
	Params     any                     `json:"allocator_params"`
	Containers []adminclient.Container `json:"containers"`
	// Events: the app's events since --events-since, limit changes left
	// out as in the text form.
	Events []adminclient.Event `json:"events"`
}

func describeJSON(e *env, c *adminclient.Client, name string, since time.Duration) error {
	a, cs, err := describeFetch(e, c, name)
	if err != nil {
		return err
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].Name < cs[j].Name })
	d := described{App: itemOf(*a), Params: a.Params, Containers: cs, Events: []adminclient.Event{}}
	if d.Containers == nil {
		d.Containers = []adminclient.Container{}
	}
	err = c.EventsSince(e.ctx, name, since.String(), false, func(ev adminclient.Event, _ []byte) {
		if ev.Kind != "limits" && ev.Raw == "" {
			d.Events = append(d.Events, ev)
		}
	})
	if err != nil {
		return err
	}
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(d)
}

// describeFetch reads the app name and its containers: describe's text
// and -o json show the same.
func describeFetch(e *env, c *adminclient.Client, name string) (*adminclient.App, []adminclient.Container, error) {
	apps, err := c.Apps(e.ctx)
	if err != nil {
		return nil, nil, err
	}
	for i := range apps {
		if apps[i].Name == name {
			cs, err := c.Containers(e.ctx, name)
			return &apps[i], cs, err
		}
	}
	return nil, nil, fmt.Errorf("unknown app %q", name)
}
