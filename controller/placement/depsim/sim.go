package depsim

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"time"

	"github.com/escra-dev/escra/controller/placement"
)

// Config is one simulation run. Defaults (dependency-aware scheduling §6.1): 200 nodes, at
// most 16 running containers and a 32 GB image store per node, Poisson
// arrivals at ~80 % utilisation under the agnostic policy, Zipf 0.75 image
// choice, tasks 1–10 s.
type Config struct {
	Nodes      int
	Slots      int
	CacheBytes int64
	Rate       float64 // arrivals per second
	DurationS  float64 // simulated seconds of arrivals
	WarmupS    float64 // arrivals before this are not measured (§6.2: second half)
	TaskMinS   float64
	TaskMaxS   float64
	Access     string  // zipf, uniform, popularity
	ZipfS      float64 // exponent of "zipf"
	PopularS   float64 // exponent of "popularity" (see docs/depsched.md)
	Policy     string  // placement.Policies
	Evict      string  // lru-image, lru-layer, lfu-layer
	Seed       int64
}

// Default is the dependency-aware scheduling paper's default setting; Rate 0 means "calibrate to 80 %
// agnostic utilisation" (Calibrate).
func Default() Config {
	return Config{Nodes: 200, Slots: 16, CacheBytes: 32e9, DurationS: 1200, WarmupS: 600,
		TaskMinS: 1, TaskMaxS: 10, Access: "zipf", ZipfS: 0.75, PopularS: 1.3,
		Policy: "random", Evict: "lru-image", Seed: 4}
}

// Result is what one run measured over the arrivals after the warm-up.
type Result struct {
	Policy, Evict, Access string
	Requests              int
	MeanStartupS          float64
	P50S, P90S, P99S      float64
	Startups              []float64 // sorted
	ComputeUsage          float64   // busy slot-seconds / (slots × window)
	CachedImages          float64   // mean per node, sampled every 10 s
	UnusedBytes           float64   // mean free store per node
	SchedP99us            float64   // wall time of placement.Schedule
}

type lstate struct {
	inUse   int     // running or pulling containers that need it
	imgRefs int     // cached images that contain it (image eviction)
	last    float64 // last use
	uses    int     // uses (LFU)
	ready   float64 // time its pull ends
}

type istate struct {
	running int
	last    float64
}

type node struct {
	pn     *placement.Node
	deps   *placement.HostDeps
	used   int64
	layers map[int32]*lstate
	images map[int32]*istate
}

type done struct {
	t    float64
	node int
	img  int32
}

type doneHeap []done

func (h doneHeap) Len() int           { return len(h) }
func (h doneHeap) Less(i, j int) bool { return h[i].t < h[j].t }
func (h doneHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *doneHeap) Push(x any)        { *h = append(*h, x.(done)) }
func (h *doneHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type arrival struct {
	t   float64
	img int32
	run float64
}

// sampler draws image indices by the access pattern.
type sampler struct {
	cdf  []float64
	perm []int32
}

func newSampler(access string, s float64, n int, rng *rand.Rand) (*sampler, error) {
	sm := &sampler{perm: make([]int32, n)}
	for i, p := range rng.Perm(n) {
		sm.perm[i] = int32(p)
	}
	switch access {
	case "uniform":
		return sm, nil
	case "zipf", "popularity":
		sm.cdf = make([]float64, n)
		var sum float64
		for k := 0; k < n; k++ {
			sum += math.Pow(float64(k+1), -s)
			sm.cdf[k] = sum
		}
		for k := range sm.cdf {
			sm.cdf[k] /= sum
		}
		return sm, nil
	}
	return nil, fmt.Errorf("access %q: want zipf, uniform or popularity", access)
}

func (sm *sampler) draw(rng *rand.Rand) int32 {
	if sm.cdf == nil {
		return sm.perm[rng.Intn(len(sm.perm))]
	}
	k := sort.SearchFloat64s(sm.cdf, rng.Float64())
	return sm.perm[min(k, len(sm.perm)-1)]
}

// Run simulates one configuration over the corpus.
func Run(cfg Config, cp *Corpus) (*Result, error) {
	if cfg.Nodes <= 0 || cfg.Slots <= 0 || cfg.CacheBytes <= 0 || cfg.Rate <= 0 || cfg.DurationS <= 0 {
		return nil, fmt.Errorf("sim: nodes, slots, cache, rate and duration must be positive")
	}
	switch cfg.Evict {
	case "lru-image", "lru-layer", "lfu-layer":
	default:
		return nil, fmt.Errorf("eviction %q: want lru-image, lru-layer or lfu-layer", cfg.Evict)
	}
	s := cfg.ZipfS
	if cfg.Access == "popularity" {
		s = cfg.PopularS
	}
	// Arrivals use their own stream, so every policy sees the same trace.
	arng := rand.New(rand.NewSource(cfg.Seed))
	smp, err := newSampler(cfg.Access, s, len(cp.Images), arng)
	if err != nil {
		return nil, err
	}
	prof, ok := placement.DepProfile(cfg.Policy, rand.New(rand.NewSource(cfg.Seed+1)))
	if !ok {
		return nil, fmt.Errorf("policy %q: want one of %v", cfg.Policy, placement.Policies)
	}
	sm := &sim{cfg: cfg, cp: cp, prof: prof}
	for i := 0; i < cfg.Nodes; i++ {
		d := placement.NewHostDeps()
		pn := &placement.Node{Name: fmt.Sprintf("n%03d", i), Index: i, CPUCap: float64(cfg.Slots),
			CPUFree: float64(cfg.Slots), AppCount: map[string]int{}, Ext: map[string]any{placement.DepsKey: d}}
		sm.nodes = append(sm.nodes, &node{pn: pn, deps: d, layers: map[int32]*lstate{}, images: map[int32]*istate{}})
		sm.pns = append(sm.pns, pn)
	}
	sm.free = cfg.Nodes * cfg.Slots
	res := &Result{Policy: cfg.Policy, Evict: cfg.Evict, Access: cfg.Access}
	var sched []float64
	var pending []arrival
	var busy float64
	nextSample := cfg.WarmupS
	var samples, imgs, unused float64

	t := 0.0
	for {
		t += arng.ExpFloat64() / cfg.Rate
		a := arrival{t: t, img: smp.draw(arng), run: cfg.TaskMinS + arng.Float64()*(cfg.TaskMaxS-cfg.TaskMinS)}
		end := t >= cfg.DurationS
		// Finish what completes before this arrival, placing the queue.
		for len(sm.done) > 0 && (end || sm.done[0].t <= t) {
			d := heap.Pop(&sm.done).(done)
			sm.finish(d)
			for len(pending) > 0 && sm.free > 0 {
				p := pending[0]
				pending = pending[1:]
				sm.place(p, d.t, res, &sched, &busy)
			}
		}
		for !end && nextSample <= t {
			for _, n := range sm.nodes {
				imgs += float64(len(n.images))
				unused += float64(max(cfg.CacheBytes-n.used, 0))
			}
			samples += float64(len(sm.nodes))
			nextSample += 10
		}
		if end {
			break
		}
		if len(pending) > 0 || sm.free == 0 {
			pending = append(pending, a)
			continue
		}
		sm.place(a, t, res, &sched, &busy)
	}
	sort.Float64s(res.Startups)
	res.Requests = len(res.Startups)
	if res.Requests > 0 {
		var sum float64
		for _, v := range res.Startups {
			sum += v
		}
		res.MeanStartupS = sum / float64(res.Requests)
		res.P50S, res.P90S, res.P99S = quantile(res.Startups, .5), quantile(res.Startups, .9), quantile(res.Startups, .99)
	}
	res.ComputeUsage = busy / (float64(cfg.Nodes*cfg.Slots) * (cfg.DurationS - cfg.WarmupS))
	if samples > 0 {
		res.CachedImages, res.UnusedBytes = imgs/samples, unused/samples
	}
	sort.Float64s(sched)
	res.SchedP99us = quantile(sched, .99)
	return res, nil
}

type sim struct {
	cfg   Config
	cp    *Corpus
	prof  *placement.Profile
	nodes []*node
	pns   []*placement.Node
	free  int
	done  doneHeap
}

// place schedules one arrival at time now: the pull is Σ of the missing
// layers' pull times (§6.1), a layer another container is still pulling
// there is waited for, and the container holds its slot from placement
// through pull and run.
func (sm *sim) place(a arrival, now float64, res *Result, sched *[]float64, busy *float64) {
	img := &sm.cp.Images[a.img]
	t0 := time.Now()
	r, err := sm.prof.Schedule(&img.Req, sm.pns)
	el := float64(time.Since(t0).Microseconds())
	if err != nil {
		// Not reached: callers check free slots first.
		return
	}
	n := sm.nodes[r.Node.Index]
	placement.Assume(&img.Req, r.Node)
	sm.free--
	pull := sm.provision(n, a.img, now)
	start := now + pull
	heap.Push(&sm.done, done{t: start + a.run, node: r.Node.Index, img: a.img})
	if a.t >= sm.cfg.WarmupS {
		res.Startups = append(res.Startups, start-a.t)
		*busy += pull + a.run
		*sched = append(*sched, el)
	}
}

// provision pulls what node n lacks of image i, evicting first, and
// returns the pull time.
func (sm *sim) provision(n *node, i int32, now float64) float64 {
	img := &sm.cp.Images[i]
	// Pin the image and its present layers before evicting for the rest.
	is := n.images[i]
	newImg := is == nil
	if newImg {
		is = &istate{}
		n.images[i] = is
		n.deps.Images[img.Req.Deps.Name] = true
	}
	is.running++
	is.last = now
	var need int64
	var wait float64
	for _, l := range img.Layers {
		if ls := n.layers[l]; ls != nil {
			ls.inUse++
			ls.last, ls.uses = now, ls.uses+1
			if newImg {
				ls.imgRefs++
			}
			wait = max(wait, ls.ready-now)
		} else {
			need += sm.cp.LayerSize[l]
		}
	}
	sm.evict(n, need, i)
	var pull float64
	for _, l := range img.Layers {
		if n.layers[l] != nil {
			continue
		}
		pull += sm.cp.LayerPull[l]
		n.layers[l] = &lstate{inUse: 1, imgRefs: 1, last: now, uses: 1, ready: now + pull}
		n.deps.Layers[layerName(l)] = true
		n.used += sm.cp.LayerSize[l]
	}
	return max(pull, wait)
}

// evict frees need bytes on n for image keep, taking victims in the
// policy's order from one sorted candidate list (dropping one victim does
// not reorder the rest). Only what no running container uses may go; when
// nothing may, the store runs over budget (as a real store does while its
// containers run).
func (sm *sim) evict(n *node, need int64, keep int32) {
	if n.used+need <= sm.cfg.CacheBytes {
		return
	}
	if sm.cfg.Evict == "lru-image" {
		var ids []int32
		for id, is := range n.images {
			if id != keep && is.running == 0 {
				ids = append(ids, id)
			}
		}
		sort.Slice(ids, func(i, j int) bool {
			a, b := n.images[ids[i]], n.images[ids[j]]
			if a.last != b.last {
				return a.last < b.last
			}
			return ids[i] < ids[j]
		})
		for _, id := range ids {
			if n.used+need <= sm.cfg.CacheBytes {
				return
			}
			sm.dropImage(n, id)
		}
		return
	}
	var ids []int32
	for id, ls := range n.layers {
		if ls.inUse == 0 {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool {
		return sm.layerBefore(n.layers[ids[i]], ids[i], n.layers[ids[j]], ids[j])
	})
	for _, id := range ids {
		if n.used+need <= sm.cfg.CacheBytes {
			return
		}
		sm.dropLayer(n, id)
	}
}

// layerBefore orders eviction candidates: LRU by last use; LFU by use
// count, then last use; ids break exact ties so runs are deterministic.
func (sm *sim) layerBefore(a *lstate, ai int32, b *lstate, bi int32) bool {
	if sm.cfg.Evict == "lfu-layer" && a.uses != b.uses {
		return a.uses < b.uses
	}
	if a.last != b.last {
		return a.last < b.last
	}
	return ai < bi
}

// dropImage removes an image (Docker's ImageRemove): its layers that no
// other cached image holds go with it.
func (sm *sim) dropImage(n *node, i int32) {
	delete(n.images, i)
	delete(n.deps.Images, sm.cp.Images[i].Req.Deps.Name)
	for _, l := range sm.cp.Images[i].Layers {
		ls := n.layers[l]
		if ls == nil {
			continue
		}
		if ls.imgRefs--; ls.imgRefs <= 0 && ls.inUse == 0 {
			sm.removeLayer(n, l)
		}
	}
}

// dropLayer removes one layer, and every cached image it was part of
// stops being a whole image there.
func (sm *sim) dropLayer(n *node, l int32) {
	sm.removeLayer(n, l)
	for id, is := range n.images {
		if is.running > 0 {
			continue
		}
		for _, x := range sm.cp.Images[id].Layers {
			if x == l {
				delete(n.images, id)
				delete(n.deps.Images, sm.cp.Images[id].Req.Deps.Name)
				break
			}
		}
	}
}

func (sm *sim) removeLayer(n *node, l int32) {
	delete(n.layers, l)
	delete(n.deps.Layers, layerName(l))
	n.used -= sm.cp.LayerSize[l]
}

// finish ends a container: its slot and its hold on its layers.
func (sm *sim) finish(d done) {
	n := sm.nodes[d.node]
	img := &sm.cp.Images[d.img]
	placement.Forget(&img.Req, n.pn)
	sm.free++
	if is := n.images[d.img]; is != nil {
		is.running--
	}
	for _, l := range img.Layers {
		if ls := n.layers[l]; ls != nil {
			ls.inUse--
			if sm.cfg.Evict == "lru-image" && ls.imgRefs <= 0 && ls.inUse == 0 {
				sm.removeLayer(n, l)
			}
		}
	}
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
}

// Calibrate finds the arrival rate at which the agnostic (random) policy
// keeps the cluster at util busy (§6.1: ~80 %), by a few short pilot runs.
func Calibrate(cfg Config, cp *Corpus, util float64) (float64, error) {
	c := cfg
	c.Policy, c.Evict = "random", "lru-image"
	st := cp.Stats()
	// First guess: each container holds a slot for a full pull and a task.
	c.Rate = util * float64(c.Nodes*c.Slots) / (st.MeanImagePullS + (c.TaskMinS+c.TaskMaxS)/2)
	for i := 0; i < 3; i++ {
		r, err := Run(c, cp)
		if err != nil {
			return 0, err
		}
		if r.ComputeUsage <= 0 {
			return 0, fmt.Errorf("calibration: no load measured")
		}
		c.Rate *= util / min(r.ComputeUsage, 1)
	}
	return c.Rate, nil
}
