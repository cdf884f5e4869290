package main

import (
	"strings"
	"testing"
)

// Bad --restore-after and --controller values end in one clear error
// before anything starts.
func TestBadFlagsRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--restore-after", "-1s"}, "--restore-after"},
		{[]string{"--restore-after", "soon"}, "restore-after"},
		{[]string{"--controller", "127.0.0.1:7470,nohost"}, `--controller "nohost"`},
	} {
		err := run(c.args, false)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v, want one line naming %s", c.args, err, c.want)
		}
	}
}
