package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/adminclient"
	"github.com/escra-dev/escra/controller/mu"
)

// A gateway restarted after a crash serves with the replicas its
// predecessor left running (no cold start, no new container) and removes
// the leftovers that do not answer.
func TestAdoptTakesOverLiveReplicasAndRemovesDeadOnes(t *testing.T) {
	sc := &procScaler{ceiling: 4}
	defer sc.closeAll()
	f := testFn(mu.ASMu)
	var live []Replica
	for range 2 {
		r, err := sc.Add(context.Background(), &f, "")
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, r)
	}
	sc.left = append(live, Replica{ID: "dead", Addr: "127.0.0.1:1"}, Replica{ID: "older-format"})
	g, err := New([]Function{f}, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	g.AdoptTimeout = 300 * time.Millisecond
	if err := g.Adopt(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := g.Statuses()[0]; st.Ready != 2 {
		t.Fatalf("adopted %d replicas, want the 2 live ones: %+v", st.Ready, st)
	}
	front := httptest.NewServer(g)
	defer front.Close()
	for range 4 {
		resp, err := http.Get(front.URL + "/fn/hello/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request after adoption: %d", resp.StatusCode)
		}
	}
	sc.mu.Lock()
	adds, removes, running := sc.adds, sc.removes, len(sc.srvs)
	sc.mu.Unlock()
	if adds != 2 || removes != 2 || running != 2 {
		t.Fatalf("%d adds (want the 2 before the restart), %d removes (want the dead and the unaddressed one), %d live replicas (want 2)", adds, removes, running)
	}
}

// The controller scaler reads a leftover replica's address from its name
// (<prefix><function>-<queue proxy port>), returns names of ours that hold
// no port of ours without an address (to be removed), leaves other
// containers of the app alone, and never hands an adopted port out again.
func TestControllerScalerExistingReadsPortsFromNames(t *testing.T) {
	ctrl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/containers" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, `[{"app":"hello","name":"mu-hello-20004"},{"app":"hello","name":"mu-hello-3"},
			{"app":"hello","name":"mu-hello-20005"},{"app":"hello","name":"user-sidecar"},
			{"app":"hello","name":"mu-hello-x"},{"app":"other","name":"mu-hello-20008"}]`)
	}))
	defer ctrl.Close()
	cl, err := adminclient.New(ctrl.URL)
	if err != nil {
		t.Fatal(err)
	}
	sc := &ControllerScaler{Client: cl, Prefix: "mu-", BasePort: 20000}
	f := testFn(mu.ASMu)
	got, err := sc.Existing(context.Background(), &f)
	if err != nil {
		t.Fatal(err)
	}
	want := []Replica{{ID: "mu-hello-20004", Addr: "127.0.0.1:20004"}, {ID: "mu-hello-3"}, {ID: "mu-hello-20005"}}
	if !slices.Equal(got, want) {
		t.Fatalf("Existing = %+v, want %+v", got, want)
	}
	var ports []int
	for range 3 {
		p, _ := sc.ports()
		ports = append(ports, p)
	}
	if !slices.Equal(ports, []int{20000, 20002, 20006}) {
		t.Fatalf("new replicas got ports %v, want 20000, 20002, 20006 (20004 is adopted)", ports)
	}
}
