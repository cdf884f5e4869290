package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/mu"
	"github.com/escra-dev/escra/controller/placement"
)

// Under load the Mu autoscaler adds replicas, never beyond the budget's
// ceiling, and with the load gone removes them after the grace period.
func TestEpochScalingWithinCeiling(t *testing.T) {
	sc := &procScaler{ceiling: 3, work: 50 * time.Millisecond}
	defer sc.closeAll()
	g, err := New([]Function{testFn(mu.ASMuNoPred)}, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	g.epoch = 200 * time.Millisecond // a short epoch for the test; rates are per second
	front := httptest.NewServer(g)
	defer front.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.Run(ctx); close(done) }()
	// 8 clients in closed loop: far more than one replica at
	// concurrency 2 and 50 ms (40 req/s) serves within budget.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if r, err := http.Get(front.URL + "/fn/hello/"); err == nil {
					io.Copy(io.Discard, r.Body)
					r.Body.Close()
				}
			}
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for g.Statuses()[0].Ready < 3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	st := g.Statuses()[0]
	if st.Ready != 3 {
		t.Fatalf("under load: %d replicas ready, want the ceiling 3 (%+v)", st.Ready, st)
	}
	if sc.adds > 3 {
		t.Fatalf("created %d replicas, ceiling 3", sc.adds)
	}
	deadline = time.Now().Add(20 * time.Second)
	for g.Statuses()[0].Ready > 1 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if r := g.Statuses()[0].Ready; r > 1 {
		t.Fatalf("idle: still %d replicas after the grace period", r)
	}
	cancel()
	<-done
}

// Granted replicas are created on the nodes Algorithm 3's node selection
// picks: worst fit on the emptier node, best fit on the fuller one; with
// "controller" the deployer chooses (no host); a host that refuses gets
// the replica placed by the controller instead of losing it; the first
// replica of a function at zero is placed by the node selection too.
func TestGrantedReplicasGoWhereNodeSelectionSays(t *testing.T) {
	nodes := func() []*placement.Node {
		return []*placement.Node{
			{Name: "roomy", CPUCap: 4, CPUFree: 4, MemCap: 8 << 30, MemFree: 8 << 30, AppCount: map[string]int{}},
			{Name: "busy", CPUCap: 4, CPUFree: 1.5, MemCap: 8 << 30, MemFree: 8 << 30, AppCount: map[string]int{}},
		}
	}
	for _, tc := range []struct {
		sel, refuse string
		want        []string
	}{
		{"worstfit", "", []string{"roomy", "roomy", "roomy"}},
		{"bestfit", "", []string{"busy", "busy", "busy"}},
		{NodeSelectController, "", []string{"", "", ""}},
		{"bestfit", "busy", []string{"", "", "", "busy", "busy", "busy"}},
	} {
		t.Run(tc.sel+"/"+tc.refuse, func(t *testing.T) {
			sc := &procScaler{ceiling: 4, nodes: nodes(), refuse: tc.refuse}
			defer sc.closeAll()
			g, err := New([]Function{testFn(mu.ASMu)}, sc, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := g.SetNodeSelect(tc.sel); err != nil {
				t.Fatal(err)
			}
			want := map[string]int{"hello": 3}
			granted, hosts := g.grant(context.Background(), want)
			if granted["hello"] != 3 {
				t.Fatalf("granted %d replicas, want 3", granted["hello"])
			}
			g.reconcile(g.fns["hello"], 3, granted["hello"], hosts["hello"])
			g.wg.Wait()
			sc.mu.Lock()
			got := slices.Clone(sc.hosts)
			sc.mu.Unlock()
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("adds went to %q, want %q", got, tc.want)
			}
			if r := g.Statuses()[0].Ready; r != 3 {
				t.Fatalf("%d replicas ready, want 3", r)
			}
		})
	}
	// Scale from zero: the first replica, made for a held request outside
	// the epoch, goes where the node selection says too.
	sc := &procScaler{ceiling: 4, nodes: nodes()}
	defer sc.closeAll()
	g, _ := New([]Function{testFn(mu.ASMu)}, sc, nil)
	if err := g.SetNodeSelect("bestfit"); err != nil {
		t.Fatal(err)
	}
	g.kick(g.fns["hello"])
	g.wg.Wait()
	if !slices.Equal(sc.hosts, []string{"busy"}) {
		t.Fatalf("the first replica went to %q, want [busy]", sc.hosts)
	}
	if err := g.SetNodeSelect("firstfit"); err == nil {
		t.Fatal("an unknown node selection was accepted")
	}
}

// initial_scale: Prescale starts the replicas before any request and
// returns once they are ready; the first request goes to a warm replica
// (no replica is added for it), adopted replicas count, the budget caps
// it, and a negative or above-max scale is refused.
func TestPrescaleStartsInitialReplicasBeforeTheFirstRequest(t *testing.T) {
	sc := &procScaler{ceiling: 8, work: 5 * time.Millisecond}
	defer sc.closeAll()
	f := testFn(mu.ASMu)
	f.InitialScale = 3
	g, err := New([]Function{f}, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.Prescale(ctx); err != nil {
		t.Fatal(err)
	}
	if st := g.Statuses()[0]; st.Ready != 3 || st.Pending != 0 {
		t.Fatalf("after Prescale: %d ready, %d pending; want 3, 0", st.Ready, st.Pending)
	}
	front := httptest.NewServer(g)
	defer front.Close()
	resp, err := http.Get(front.URL + "/fn/hello/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	sc.mu.Lock()
	adds := sc.adds
	sc.mu.Unlock()
	if resp.StatusCode != 200 || adds != 3 {
		t.Fatalf("first request: %d, replicas added %d; want 200 and the 3 initial ones only", resp.StatusCode, adds)
	}
	// A second Prescale adds nothing: the replicas there count.
	if err := g.Prescale(ctx); err != nil {
		t.Fatal(err)
	}
	sc.mu.Lock()
	adds = sc.adds
	sc.mu.Unlock()
	if adds != 3 {
		t.Fatalf("second Prescale added %d replicas", adds-3)
	}

	// The budget caps the initial scale.
	small := &procScaler{ceiling: 2, work: 5 * time.Millisecond}
	defer small.closeAll()
	g2, err := New([]Function{f}, small, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := g2.Prescale(ctx); err != nil {
		t.Fatal(err)
	}
	if st := g2.Statuses()[0]; st.Ready != 2 {
		t.Fatalf("budget of 2, initial_scale 3: %d ready", st.Ready)
	}

	for _, bad := range []Function{{InitialScale: -1}, {InitialScale: 5, MaxReplicas: 4}} {
		x := testFn(mu.ASMu)
		x.InitialScale, x.MaxReplicas = bad.InitialScale, bad.MaxReplicas
		if err := x.Validate(); err == nil || !strings.Contains(err.Error(), "initial_scale") {
			t.Fatalf("initial_scale %d, max %d: %v", bad.InitialScale, bad.MaxReplicas, err)
		}
	}
}
