package placement

import "testing"

const gib = int64(1) << 30

func muNodes() []*Node {
	return []*Node{
		{Name: "cpu-rich", CPUCap: 16, CPUFree: 12, MemCap: 32 * gib, MemFree: 4 * gib},
		{Name: "mem-rich", CPUCap: 16, CPUFree: 4, MemCap: 32 * gib, MemFree: 28 * gib},
		{Name: "roomy", CPUCap: 16, CPUFree: 14, MemCap: 32 * gib, MemFree: 30 * gib},
		{Name: "tight", CPUCap: 16, CPUFree: 2, MemCap: 32 * gib, MemFree: 2 * gib},
	}
}

func pick(t *testing.T, alg string, r *Request, nodes []*Node) string {
	t.Helper()
	p, err := MuProfile(alg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Schedule(r, nodes)
	if err != nil {
		t.Fatal(err)
	}
	return res.Node.Name
}

// Each node selection of §3.5.2 picks the node its formula says.
func TestMuNodeSelection(t *testing.T) {
	small := &Request{Name: "s", CPU: 1, Memory: gib}
	if got := pick(t, "worstfit", small, muNodes()); got != "roomy" {
		t.Fatalf("WorstFit picked %s, want the node with most room left (roomy)", got)
	}
	if got := pick(t, "bestfit", small, muNodes()); got != "tight" {
		t.Fatalf("BestFit picked %s, want the tightest node that fits (tight)", got)
	}
	// A CPU-heavy pod aligns with the CPU-rich node's free vector more
	// than with the memory-rich one's (roomy has both and wins overall).
	heavy := &Request{Name: "h", CPU: 3, Memory: gib / 4}
	nodes := muNodes()[:2]
	if got := pick(t, "alignment", heavy, nodes); got != "cpu-rich" {
		t.Fatalf("Alignment picked %s for a CPU-heavy pod, want cpu-rich", got)
	}
	if got := pick(t, "alignment", &Request{Name: "m", CPU: 0.1, Memory: 3 * gib}, nodes); got != "mem-rich" {
		t.Fatalf("Alignment picked %s for a memory-heavy pod, want mem-rich", got)
	}
	// A pod too big for tight is never put there.
	if got := pick(t, "bestfit", &Request{Name: "b", CPU: 3, Memory: gib}, muNodes()); got == "tight" {
		t.Fatal("BestFit placed a pod on a node without room")
	}
	if _, err := MuProfile("random"); err == nil {
		t.Fatal("unknown placement accepted")
	}
}

// Algorithm 3 shares a cluster too small for both functions by dominant
// share: the large function gets a pod where FIFO (small one first)
// starves it, and the drop rule ends the loop when nothing fits.
func TestPlaceDRFIsFairerThanFIFO(t *testing.T) {
	mk := func() ([]*Demand, []*Node) {
		return []*Demand{
				{App: "small", CPU: 1, Memory: gib / 4, Pods: 10},
				{App: "large", CPU: 4, Memory: gib, Pods: 10},
			}, []*Node{
				{Name: "n1", CPUCap: 6, CPUFree: 6, MemCap: 8 * gib, MemFree: 8 * gib},
				{Name: "n2", CPUCap: 6, CPUFree: 6, MemCap: 8 * gib, MemFree: 8 * gib},
			}
	}
	p, _ := MuProfile("worstfit")
	ds, nodes := mk()
	out := PlaceDRF(p, ds, nodes)
	if ds[1].Placed == 0 || ds[0].Placed == 0 {
		t.Fatalf("DRF starved a function: small %d, large %d", ds[0].Placed, ds[1].Placed)
	}
	if ds[0].AllocCPU+ds[1].AllocCPU > 12 || len(out) != ds[0].Placed+ds[1].Placed {
		t.Fatalf("overcommitted or miscounted: %+v %+v, %d placements", ds[0], ds[1], len(out))
	}
	// Dominant shares (CPU here) end within one large pod of each other.
	if d := ds[1].AllocCPU - ds[0].AllocCPU; d > 4 || d < -4 {
		t.Fatalf("dominant shares apart by %.0f cores", d)
	}
	for _, n := range nodes {
		if n.CPUFree < -1e-9 || n.MemFree < 0 {
			t.Fatalf("node %s overbooked: %+v", n.Name, n)
		}
	}
	def, _ := MuProfile("default")
	ds, nodes = mk()
	PlaceFIFO(def, ds, nodes)
	if ds[0].Placed != 10 || ds[1].Placed != 0 {
		t.Fatalf("FIFO: small %d large %d, want 10 and 0", ds[0].Placed, ds[1].Placed)
	}
}
