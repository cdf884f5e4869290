package containers

import (
	"strings"
	"testing"
)

func TestValidateApp(t *testing.T) {
	for _, ok := range []string{"web", "a", "a-b-9", strings.Repeat("x", 63)} {
		if err := ValidateApp(ok); err != nil {
			t.Errorf("%q rejected: %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", 64), "a b", "a/b", "é", "x\n", "a:b", "A-b_c.9", "Web", "-a"} {
		if err := ValidateApp(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestStaticValidate(t *testing.T) {
	if err := (Static{Specs: []CgroupSpec{{App: "vm", Path: "/escra/vm1"}}}).Validate(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []CgroupSpec{{App: "", Path: "/x"}, {App: "a", Path: "x"}, {App: "a", Path: "/"}, {App: "a", Path: "/x/../y"}} {
		if err := (Static{Specs: []CgroupSpec{s}}).Validate(); err == nil {
			t.Errorf("%+v accepted", s)
		}
	}
}

func FuzzValidateApp(f *testing.F) {
	f.Add("web")
	f.Fuzz(func(t *testing.T, s string) {
		if ValidateApp(s) == nil {
			if s == "" || len(s) > 63 || strings.ContainsAny(s, " /:\n") {
				t.Fatalf("accepted %q", s)
			}
		}
	})
}
