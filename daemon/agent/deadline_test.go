package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func paramFile(t *testing.T, body string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "oom_timeout_ms")
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// On escra.ko escrad's verdict deadline fits inside the module's: unset,
// it is the module's minus the reply margin; a deadline that with the
// margin passes the module's is refused in one line naming both; the
// stock-kernel backends keep their own.
func TestOOMDeadlineFitsTheKernels(t *testing.T) {
	shipped := paramFile(t, "100\n") // escra.ko's default
	for _, c := range []struct {
		set    time.Duration
		kernel bool
		param  string
		want   time.Duration
		refuse string
	}{
		{0, true, shipped, 90 * time.Millisecond, ""},
		{90 * time.Millisecond, true, shipped, 90 * time.Millisecond, ""},
		{91 * time.Millisecond, true, shipped, 0, "oom_timeout_ms 100"},
		{200 * time.Millisecond, true, shipped, 0, "--oom-deadline 200ms"},
		{time.Second, true, paramFile(t, "2000"), time.Second, ""},
		{0, true, paramFile(t, "12"), 6 * time.Millisecond, ""},
		{0, true, paramFile(t, "soon"), 0, "not a timeout"},
		{0, true, filepath.Join(t.TempDir(), "absent"), 0, "cannot read"},
		{0, false, "", defaultOOMDeadline, ""},
		{time.Second, false, shipped, time.Second, ""},
	} {
		got, err := oomDeadline(c.set, c.kernel, c.param)
		switch {
		case c.refuse != "":
			if err == nil || !strings.Contains(err.Error(), c.refuse) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%v kernel=%v: %v, %v; want one line naming %q", c.set, c.kernel, got, err, c.refuse)
			}
		case err != nil || got != c.want:
			t.Errorf("%v kernel=%v: %v, %v; want %v", c.set, c.kernel, got, err, c.want)
		}
	}
}
