package server

import (
	"slices"
	"testing"
)

func nameList(cs []ContainerState) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// Only what changed is touched; names the deployer never made are left.
func TestPlanRollout(t *testing.T) {
	dc := func(name, image string) DeployContainer {
		return DeployContainer{Name: name, Image: image, Env: []string{"ESCRA_APP=a"}}
	}
	last := []DeployContainer{dc("a-web-1", "v1"), dc("a-web-2", "v1"), dc("a-web-3", "v1"), dc("a-db", "d1")}
	members := []ContainerState{{Name: "a-web-1"}, {Name: "a-web-2"}, {Name: "a-web-3"}, {Name: "a-db"}, {Name: "by-hand"}}

	// Scale up: only the new name is created.
	p := planRollout(members, last, append(slices.Clone(last), dc("a-web-4", "v1")))
	if len(p.remove)+len(p.replace) != 0 || len(p.create) != 1 || p.create[0].Name != "a-web-4" || len(p.unchanged) != 4 {
		t.Fatalf("scale up: %+v", p)
	}
	// Scale down: only the dropped name goes; by-hand stays.
	p = planRollout(members, last, last[1:])
	if !slices.Equal(nameList(p.remove), []string{"a-web-1"}) || len(p.create) != 0 {
		t.Fatalf("scale down: %+v", p)
	}
	// New image for web: its replicas are replaced, db is not.
	want := []DeployContainer{dc("a-web-1", "v2"), dc("a-web-2", "v2"), dc("a-web-3", "v2"), dc("a-db", "d1")}
	p = planRollout(members, last, want)
	if !slices.Equal(nameList(p.replace), []string{"a-web-1", "a-web-2", "a-web-3"}) || len(p.create) != 3 || p.create[0].Image != "v2" ||
		!slices.Equal(p.unchanged, []string{"a-db"}) {
		t.Fatalf("replace: %+v", p)
	}
	// Bootstrap limits alone do not make a replacement.
	bigger := slices.Clone(last)
	bigger[0].CPUCores = 2
	if p := planRollout(members, last, bigger); len(p.replace) != 0 {
		t.Fatalf("limits replaced a container: %+v", p)
	}
	// A running name with no record is kept.
	if p := planRollout(members, nil, want); len(p.replace)+len(p.remove)+len(p.create) != 0 {
		t.Fatalf("unknown template touched: %+v", p)
	}
}
