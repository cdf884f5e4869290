package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/escra-dev/escra/controller/mu"
)

func TestFunctionValidation(t *testing.T) {
	f := testFn(mu.ASMu)
	f.LB = "random"
	if _, err := New([]Function{f}, &procScaler{}, nil); err == nil || !strings.Contains(err.Error(), "lb") {
		t.Fatalf("bad lb: %v", err)
	}
	f = testFn(mu.ASRPS)
	f.KPATarget = 0
	if err := f.Validate(); err == nil {
		t.Fatal("rps without a target accepted")
	}
	if m := parseMetrics(http.Header{mu.HeaderQueue: {"-1"}, mu.HeaderExecMs: {"1"}, mu.HeaderDeparture: {"1"}, mu.HeaderConfidence: {"0.5"}}); m != nil {
		t.Fatal("negative queue accepted")
	}
	if m := parseMetrics(http.Header{mu.HeaderQueue: {"1"}, mu.HeaderExecMs: {"NaN"}, mu.HeaderDeparture: {"1"}, mu.HeaderConfidence: {"0.5"}}); m != nil {
		t.Fatal("NaN accepted")
	}
}
