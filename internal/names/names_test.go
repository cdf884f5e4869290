package names

import (
	"strings"
	"testing"
)

func TestValidApp(t *testing.T) {
	for _, ok := range []string{"a", "shop", "web-1", "0x", strings.Repeat("a", 63), "a-b-c"} {
		if err := ValidateApp(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "Shop", "a_b", "a.b", "a b", strings.Repeat("a", 64), "é", "a\n"} {
		if ValidApp(bad) {
			t.Errorf("%q accepted", bad)
		}
		if err := ValidateApp(bad); err == nil || !strings.Contains(err.Error(), Rule) {
			t.Errorf("%q: error %v does not state the rule", bad, err)
		}
	}
}

func FuzzValidApp(f *testing.F) {
	f.Add("shop")
	f.Add("A_b.c")
	f.Fuzz(func(t *testing.T, s string) {
		if !ValidApp(s) {
			return
		}
		// What passes is a valid Docker name prefix and a DNS label.
		if len(s) > MaxApp || strings.ToLower(s) != s || strings.ContainsAny(s, "_. /") || s[0] == '-' || s[len(s)-1] == '-' {
			t.Fatalf("%q accepted", s)
		}
	})
}
