package server

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// The scale routes' refusals (the creating itself is proven against the
// real engine by controller/mu/gateway's e2e test).
func TestScaleRefusals(t *testing.T) {
	s := start(t, nil)
	ctx := context.Background()
	c := []DeployContainer{{Name: "x", Image: "img", CPUCores: 0.1, MemoryBytes: 64 << 20}}
	if _, err := s.ScaleOut(ctx, "nope", c); !errors.Is(err, ErrUnknownApp) {
		t.Errorf("scale out of an unknown app: %v", err)
	}
	if err := s.ScaleIn(ctx, "nope", "x"); !errors.Is(err, ErrUnknownApp) {
		t.Errorf("scale in of an unknown app: %v", err)
	}
	if err := s.DefineApp(AppSpec{Name: "a", CPUCores: 1, MemoryBytes: 1 << 30, Sigma: 0.1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ScaleOut(ctx, "a", nil); err == nil || !strings.Contains(err.Error(), "no containers") {
		t.Errorf("empty scale out: %v", err)
	}
	if _, err := s.ScaleOut(ctx, "a", c); err == nil || !strings.Contains(err.Error(), "no host") {
		t.Errorf("scale out without hosts: %v", err)
	}
	if err := s.ScaleIn(ctx, "a", "ghost"); err == nil || !strings.Contains(err.Error(), `no container "ghost"`) {
		t.Errorf("scale in of a missing container: %v", err)
	}
}
