package mu

import (
	"fmt"
	"math"
	"time"
)

// Autoscaling policies (Mu §3.3 and its Knative baselines).
const (
	ASMu          = "mu"
	ASMuNoPred    = "mu_nopred"
	ASRPS         = "rps"
	ASConcurrency = "concurrency"
)

// ASPolicies lists the autoscalers NewAutoscaler builds.
var ASPolicies = []string{ASRPS, ASConcurrency, ASMuNoPred, ASMu}

// Epoch is the autoscaling period (§3.3: 2 s, Knative's tick).
const Epoch = 2 * time.Second

// Observation is what the gateway measured over one epoch for one
// function.
type Observation struct {
	Ready       int     // replicas serving or starting (N_cur)
	Arrivals    float64 // requests that arrived in the epoch
	EpochSec    float64 // its length, seconds
	Concurrency float64 // mean requests in flight (queued or running) over the epoch
	Queued      float64 // requests waiting in the queue proxies at the end (Σ Q_i)
	CapE        float64 // estimated capacity of one pod, req/s (Pool.Capacity); 0 = unknown
	ExecSec     float64 // ET_avg, seconds
}

// Rate is IR_cur, req/s.
func (o Observation) Rate() float64 {
	if o.EpochSec <= 0 {
		return 0
	}
	return o.Arrivals / o.EpochSec
}

// Autoscaler turns one epoch's observation into a desired replica count.
type Autoscaler interface {
	Name() string
	Desired(o Observation) int
}

// MuConfig holds the Mu autoscaler's parameters.
type MuConfig struct {
	SLO         time.Duration // per-request response-time objective
	Grace       int           // epochs N_des must stay below N_cur before scaling down (Table 4: 16)
	Predict     bool          // Algorithm 2 on (mu) or off (mu_nopred)
	DefaultCap  float64       // Cap_e before any pod reported one, req/s
	Concurrency int           // container concurrency, for DefaultCap when 0
	Predictor   PredictorConfig
}

// MuAutoscaler is Eqs 1–4 with the grace period (§3.3).
type MuAutoscaler struct {
	cfg   MuConfig
	pred  *Predictor
	below []int // N_des of the consecutive epochs below N_cur (its length is what counts)
	last  struct {
		NIR, NQueue int
		Pred        float64
	}
}

// NewMuAutoscaler returns Mu's autoscaler.
func NewMuAutoscaler(cfg MuConfig) *MuAutoscaler {
	if cfg.Grace <= 0 {
		cfg.Grace = 16
	}
	if cfg.SLO <= 0 {
		cfg.SLO = time.Second
	}
	a := &MuAutoscaler{cfg: cfg}
	if cfg.Predict {
		a.pred = NewPredictor(cfg.Predictor)
	}
	return a
}

func (a *MuAutoscaler) Name() string {
	if a.cfg.Predict {
		return ASMu
	}
	return ASMuNoPred
}

// Terms returns the last epoch's N_IR (Eq 1) and N_Queue (Eq 2).
func (a *MuAutoscaler) Terms() (nIR, nQueue int) { return a.last.NIR, a.last.NQueue }

// Predicted is the last IR_pred (0 without the predictor).
func (a *MuAutoscaler) Predicted() float64 { return a.last.Pred }

// Desired computes N_des (Eqs 1–3), caps a scale-up at twice N_cur (Eq 4;
// at least one pod from zero) and holds a scale-down for Grace epochs.
func (a *MuAutoscaler) Desired(o Observation) int {
	ir := o.Rate()
	pred := ir
	if a.pred != nil {
		pred = a.pred.Observe(ir)
	}
	a.last.Pred = pred
	capE := o.CapE
	if capE <= 0 {
		capE = a.cfg.DefaultCap
	}
	if capE <= 0 && o.ExecSec > 0 {
		capE = float64(max(a.cfg.Concurrency, 1)) / o.ExecSec
	}
	if capE <= 0 {
		// No replica has answered yet: Eqs 1–2 have no Cap_e to divide
		// by. The replicas starting are the capacity already ordered;
		// wait for their first report. (Assuming 1 req/s per replica, as
		// before, turned every request held during a cold start into a
		// replica and Eq 4 doubled N_cur each epoch until the first answer:
		// 1, 2, 4, 8, 16 with 8 s starts in ScaleSim.)
		a.last.NIR, a.last.NQueue = 0, 0
		a.below = a.below[:0]
		return max(o.Ready, 1)
	}
	nIR := int(math.Ceil(math.Max(ir, pred)/capE - 1e-9)) // Eq 1
	// Eq 2. Its numerator is printed as QT_avg (a time) but the units
	// (req/s × s below) need a request count: the requests queued at the
	// proxies, which must be served within what the SLO leaves after
	// execution. A budget under a tenth of the SLO is held at a tenth.
	budget := math.Max(a.cfg.SLO.Seconds()-o.ExecSec, a.cfg.SLO.Seconds()/10)
	nQ := int(math.Ceil(o.Queued/(capE*budget) - 1e-9))
	a.last.NIR, a.last.NQueue = nIR, nQ
	des := nIR + nQ // Eq 3
	cur := o.Ready
	switch {
	case des > cur:
		a.below = a.below[:0]
		return min(des, max(2*cur, 1)) // Eq 4
	case des < cur:
		a.below = append(a.below, des)
		if len(a.below) < a.cfg.Grace {
			return cur
		}
		// Held long enough: implement this epoch's N_des (§3.3).
		a.below = a.below[:0]
		return des
	default:
		a.below = a.below[:0]
		return cur
	}
}

// KPAConfig is a Knative Pod Autoscaler's configuration (knative/serving
// autoscaler defaults: 60 s stable window, panic window 10 % of it, panic
// threshold 200 %, target utilisation 70 %, scale-down at most halves,
// scale to zero after the stable window without traffic).
type KPAConfig struct {
	Metric          string  // "rps" or "concurrency"
	Target          float64 // per-pod target of the metric
	Utilization     float64 // target utilisation, 0..1
	StableWindow    time.Duration
	PanicWindowPct  float64 // panic window as % of the stable window
	PanicThreshold  float64 // panic when desired/ready ≥ this (2.0)
	MaxScaleUpRate  float64
	MaxScaleDownRat float64
}

func (c KPAConfig) withDefaults() KPAConfig {
	if c.Utilization <= 0 || c.Utilization > 1 {
		c.Utilization = 0.7
	}
	if c.StableWindow <= 0 {
		c.StableWindow = 60 * time.Second
	}
	if c.PanicWindowPct <= 0 {
		c.PanicWindowPct = 10
	}
	if c.PanicThreshold <= 0 {
		c.PanicThreshold = 2
	}
	if c.MaxScaleUpRate <= 0 {
		c.MaxScaleUpRate = 1000
	}
	if c.MaxScaleDownRat <= 0 {
		c.MaxScaleDownRat = 2
	}
	return c
}

// KPA is the Knative Pod Autoscaler's algorithm in RPS or concurrency
// mode: desired = ⌈window average / (target × utilisation)⌉ over the
// stable window, or over the panic window while panicking; in panic it
// never scales down, and it leaves panic one stable window after the
// panic condition last held.
type KPA struct {
	cfg        KPAConfig
	samples    []float64 // one per epoch, newest last
	epoch      time.Duration
	panicking  bool
	panicSince int // epochs since the panic condition last held
	panicMax   int
}

// NewKPA returns a KPA autoscaler for the metric "rps" or "concurrency".
func NewKPA(cfg KPAConfig) (*KPA, error) {
	if cfg.Metric != ASRPS && cfg.Metric != ASConcurrency {
		return nil, fmt.Errorf("unknown KPA metric %q (want rps or concurrency)", cfg.Metric)
	}
	if cfg.Target <= 0 {
		return nil, fmt.Errorf("KPA target must be positive, got %v", cfg.Target)
	}
	return &KPA{cfg: cfg.withDefaults(), epoch: Epoch}, nil
}

func (k *KPA) Name() string { return k.cfg.Metric }

func (k *KPA) avg(n int) float64 {
	n = min(max(n, 1), len(k.samples))
	var s float64
	for _, v := range k.samples[len(k.samples)-n:] {
		s += v
	}
	return s / float64(n)
}

// Desired implements Autoscaler.
func (k *KPA) Desired(o Observation) int {
	v := o.Rate()
	if k.cfg.Metric == ASConcurrency {
		v = o.Concurrency
	}
	stableN := int(k.cfg.StableWindow / k.epoch)
	panicN := max(int(math.Round(float64(stableN)*k.cfg.PanicWindowPct/100)), 1)
	k.samples = append(k.samples, v)
	if len(k.samples) > stableN {
		k.samples = k.samples[len(k.samples)-stableN:]
	}
	per := k.cfg.Target * k.cfg.Utilization
	stable := int(math.Ceil(k.avg(stableN)/per - 1e-9))
	panicDes := int(math.Ceil(k.avg(panicN)/per - 1e-9))
	ready := o.Ready
	if ready > 0 && float64(panicDes)/float64(ready) >= k.cfg.PanicThreshold {
		if !k.panicking {
			k.panicMax = ready
		}
		k.panicking, k.panicSince = true, 0
	} else if k.panicking {
		k.panicSince++
		if k.panicSince >= stableN {
			k.panicking = false
		}
	}
	des := stable
	if k.panicking {
		// Never scale down while panicking.
		k.panicMax = max(k.panicMax, panicDes)
		des = k.panicMax
	}
	if ready > 0 {
		des = min(des, int(math.Ceil(k.cfg.MaxScaleUpRate*float64(ready))))
		des = max(des, int(math.Floor(float64(ready)/k.cfg.MaxScaleDownRat)))
	}
	// Scale to zero only after a whole stable window without traffic.
	if des == 0 && k.avg(stableN) > 0 {
		des = 1
	}
	return des
}

// NewAutoscaler builds one of ASPolicies. kpaTarget is the per-pod target
// of the RPS or concurrency metric (ignored for Mu).
func NewAutoscaler(name string, mu MuConfig, kpaTarget float64) (Autoscaler, error) {
	switch name {
	case ASMu, ASMuNoPred:
		mu.Predict = name == ASMu
		return NewMuAutoscaler(mu), nil
	case ASRPS, ASConcurrency:
		return NewKPA(KPAConfig{Metric: name, Target: kpaTarget})
	}
	return nil, fmt.Errorf("unknown autoscaler %q (want rps, concurrency, mu_nopred or mu)", name)
}
