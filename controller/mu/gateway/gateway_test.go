package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/escra-dev/escra/controller/mu"
	"github.com/escra-dev/escra/controller/mu/queueproxy"
	"github.com/escra-dev/escra/controller/placement"
)

// procScaler runs replicas as in-process queue proxies in front of a
// sleeping handler: a stand-in for the controller only in these unit tests
// of the gateway's own logic (the e2e test uses the real controller).
type procScaler struct {
	mu      sync.Mutex
	ceiling int
	work    time.Duration
	srvs    map[string]*http.Server
	adds    int
	removes int
	nodes   []*placement.Node
	hosts   []string  // the host of each Add, in order
	refuse  string    // a host whose Adds fail
	left    []Replica // what Existing reports: replicas of an earlier gateway
}

func (p *procScaler) Existing(context.Context, *Function) ([]Replica, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.left), nil
}

func (p *procScaler) Ceiling(context.Context, *Function) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ceiling, nil
}
func (p *procScaler) Nodes(context.Context) ([]*placement.Node, error) { return p.nodes, nil }

func (p *procScaler) Add(_ context.Context, f *Function, host string) (Replica, error) {
	p.mu.Lock()
	p.hosts = append(p.hosts, host)
	refused := host != "" && host == p.refuse
	p.mu.Unlock()
	if refused {
		return Replica{}, fmt.Errorf("host %s has no room", host)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(p.work)
		fmt.Fprintln(w, "done", r.URL.Path)
	}))
	qp, err := queueproxy.New(up.URL, f.Concurrency, 100)
	if err != nil {
		return Replica{}, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Replica{}, err
	}
	srv := &http.Server{Handler: qp}
	go srv.Serve(ln)
	srv.RegisterOnShutdown(up.Close)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.adds++
	id := fmt.Sprintf("r%d", p.adds)
	if p.srvs == nil {
		p.srvs = map[string]*http.Server{}
	}
	p.srvs[id] = srv
	return Replica{ID: id, Addr: ln.Addr().String()}, nil
}

func (p *procScaler) Remove(_ context.Context, _ *Function, id string) error {
	p.mu.Lock()
	s := p.srvs[id]
	delete(p.srvs, id)
	p.removes++
	p.mu.Unlock()
	if s != nil {
		s.Close()
	}
	return nil
}

func (p *procScaler) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.srvs {
		s.Close()
	}
}

func testFn(as string) Function {
	return Function{Name: "hello", CPUCores: 0.5, MemoryBytes: 64 << 20, Concurrency: 2, SLO: time.Second,
		Autoscaler: as, LB: mu.LBMu, KPATarget: 5, Grace: 2}
}

// The first request to a function with no replica is held until one is
// ready, then answered; the client never sees the piggybacked headers.
func TestScaleFromZeroAndHeadersStripped(t *testing.T) {
	sc := &procScaler{ceiling: 4, work: 10 * time.Millisecond}
	defer sc.closeAll()
	g, err := New([]Function{testFn(mu.ASMu)}, sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(g)
	defer front.Close()
	resp, err := http.Get(front.URL + "/fn/hello/work")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "done /work") {
		t.Fatalf("first request: %d %q", resp.StatusCode, body)
	}
	for h := range resp.Header {
		if strings.HasPrefix(h, "X-Mu-") {
			t.Fatalf("client saw piggybacked header %s", h)
		}
	}
	if st := g.Statuses()[0]; st.Ready != 1 || st.Served != 1 {
		t.Fatalf("after scale from zero: %+v", st)
	}
	// Unknown function: 404 with one line.
	resp, _ = http.Get(front.URL + "/fn/nope/x")
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("unknown function: %d", resp.StatusCode)
	}
	g.wg.Wait()
}
