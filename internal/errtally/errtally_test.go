package errtally

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestCountsAndLines(t *testing.T) {
	var out bytes.Buffer
	tl := New(slog.New(slog.NewTextHandler(&out, nil)), "soak error", map[string]string{"race": "the run's own reconnect"})
	tl.Add("race", errors.New("closed"), "host", "h1")
	tl.Add("race", errors.New("closed"))
	tl.Add("denied", errors.New("pool empty"), "handle", 7)
	byKind, exp, unexp := tl.Counts()
	if byKind["race"] != 2 || byKind["denied"] != 1 || exp != 2 || unexp != 1 {
		t.Fatalf("counts %v expected %d unexpected %d", byKind, exp, unexp)
	}
	if got := Line(byKind); got != "denied 1, race 2" {
		t.Fatalf("line %q", got)
	}
	if Line(nil) != "none" {
		t.Fatal("empty line")
	}
	log := out.String()
	if strings.Count(log, "msg=\"soak error\"") != 3 || !strings.Contains(log, "kind=denied expected=false err=\"pool empty\" handle=7") {
		t.Fatalf("log:\n%s", log)
	}
	// Without expected kinds every error is unexpected and lines say nothing about it.
	out.Reset()
	tl = New(slog.New(slog.NewTextHandler(&out, nil)), "loadgen error", nil)
	tl.Add("telemetry_send", errors.New("x"))
	if _, exp, unexp := tl.Counts(); exp != 0 || unexp != 1 || strings.Contains(out.String(), "expected=") {
		t.Fatalf("nil expected: %d %d %q", exp, unexp, out.String())
	}
}
