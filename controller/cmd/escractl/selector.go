package main

import (
	"fmt"
	"strings"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/spec"
)

// selector is kubectl's -l: requirements that must all hold, each
// key=value (or ==), key!=value, key (has it) or !key (lacks it).
type selector []requirement

type requirement struct {
	key, value string
	op         string // "=", "!=", "exists", "!exists"
}

func parseSelector(s string) (selector, error) {
	var sel selector
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		var r requirement
		switch {
		case part == "":
			return nil, fmt.Errorf("-l %q: an empty requirement (want key=value, key!=value, key or !key, comma-separated)", s)
		case strings.Contains(part, "!="):
			r.key, r.value, _ = strings.Cut(part, "!=")
			r.op = "!="
		case strings.Contains(part, "=="):
			r.key, r.value, _ = strings.Cut(part, "==")
			r.op = "="
		case strings.Contains(part, "="):
			r.key, r.value, _ = strings.Cut(part, "=")
			r.op = "="
		case strings.HasPrefix(part, "!"):
			r.key, r.op = strings.TrimSpace(part[1:]), "!exists"
		default:
			r.key, r.op = part, "exists"
		}
		r.key, r.value = strings.TrimSpace(r.key), strings.TrimSpace(r.value)
		if !spec.ValidLabel(r.key, r.value) {
			return nil, fmt.Errorf("-l %q: %q is not a label key and value (keys: letters, digits, '.', '_', '-', an optional prefix/)", s, part)
		}
		sel = append(sel, r)
	}
	return sel, nil
}

func (sel selector) matches(labels map[string]string) bool {
	for _, r := range sel {
		v, has := labels[r.key]
		switch r.op {
		case "=":
			if !has || v != r.value {
				return false
			}
		case "!=":
			if has && v == r.value {
				return false
			}
		case "exists":
			if !has {
				return false
			}
		case "!exists":
			if has {
				return false
			}
		}
	}
	return true
}

// appLabels are the labels of the app's spec, and escra.app=NAME, the
// label its containers carry in Docker.
func appLabels(a adminclient.App) map[string]string {
	l := map[string]string{"escra.app": a.Name}
	if a.Spec != nil {
		for k, v := range a.Spec.Labels {
			l[k] = v
		}
	}
	return l
}

// selectApps keeps the apps sel matches (all for a nil sel).
func selectApps(apps []adminclient.App, sel selector) []adminclient.App {
	if sel == nil {
		return apps
	}
	var out []adminclient.App
	for _, a := range apps {
		if sel.matches(appLabels(a)) {
			out = append(out, a)
		}
	}
	return out
}

// selectorFlag is a parsed -l; given tells "-l ”" from no -l.
type selectorFlag struct {
	sel   selector
	given bool
}

func (f *selectorFlag) set(s string) error {
	if s == "" {
		return nil
	}
	sel, err := parseSelector(s)
	if err != nil {
		return err
	}
	f.sel, f.given = sel, true
	return nil
}

// selectContainers keeps the containers of the apps sel matches.
func selectContainers(e *env, c *adminclient.Client, cs []adminclient.Container, sel selector) ([]adminclient.Container, error) {
	if sel == nil {
		return cs, nil
	}
	apps, err := c.Apps(e.ctx)
	if err != nil {
		return nil, err
	}
	keep := map[string]bool{}
	for _, a := range selectApps(apps, sel) {
		keep[a.Name] = true
	}
	var out []adminclient.Container
	for _, ct := range cs {
		if keep[ct.App] {
			out = append(out, ct)
		}
	}
	return out, nil
}
