package mu

import (
	"math"
)

// PredictorConfig is Algorithm 2's hyperparameter grid. Mu §3.2 runs
// 50 models: windows {10, 50, 100, 500, 1000} × learning rates 10^-1 …
// 10^-10, with EWMA coefficient 0.99 for the running error.
type PredictorConfig struct {
	Windows []int
	Rates   []float64
	Alpha   float64
}

// DefaultPredictorConfig is the paper's grid.
func DefaultPredictorConfig() PredictorConfig {
	rates := make([]float64, 10)
	for i := range rates {
		rates[i] = math.Pow(10, -float64(i+1))
	}
	return PredictorConfig{Windows: []int{10, 50, 100, 500, 1000}, Rates: rates, Alpha: 0.99}
}

// lrModel is one online linear regression: the next rate from the last n,
// trained by one SGD step per epoch.
type lrModel struct {
	n    int
	lr   float64
	w    []float64 // one weight per rate of the window but the latest
	pred float64   // its prediction for the current epoch, -1 = none yet
	err  float64   // running |error| (EWMA)
	seen int       // epochs scored
}

// Predictor is Algorithm 2 (Mu §3.2): many online regressions and
// the naive "next = current" predictor; each epoch the one with the least
// running error gives the prediction.
type Predictor struct {
	cfg     PredictorConfig
	models  []*lrModel
	hist    []float64 // observed rates, oldest first (bounded)
	naivErr float64
	naivN   int
	scale   float64 // running max of the rate; inputs are divided by it
	last    string  // name of the winner, for metrics
}

// NewPredictor builds the grid of models.
func NewPredictor(cfg PredictorConfig) *Predictor {
	if len(cfg.Windows) == 0 || len(cfg.Rates) == 0 {
		d := DefaultPredictorConfig()
		cfg.Windows, cfg.Rates = d.Windows, d.Rates
	}
	if cfg.Alpha <= 0 || cfg.Alpha >= 1 {
		cfg.Alpha = 0.99
	}
	p := &Predictor{cfg: cfg, scale: 1}
	for _, n := range cfg.Windows {
		for _, lr := range cfg.Rates {
			m := &lrModel{n: n, lr: lr, w: make([]float64, n), pred: -1}
			// All weights zero: the naive predictor, so an untrained
			// model is no worse than it.
			p.models = append(p.models, m)
		}
	}
	return p
}

func (p *Predictor) maxWindow() int {
	w := 0
	for _, n := range p.cfg.Windows {
		w = max(w, n)
	}
	return w
}

// Observe feeds the incoming rate of the epoch that just ended and returns
// the predicted rate of the next one (lines 1–10). The running error is of
// the absolute difference: line 5 prints a signed one, under which a model
// that always over-predicts would look best.
func (p *Predictor) Observe(ir float64) float64 {
	if math.IsNaN(ir) || math.IsInf(ir, 0) || ir < 0 {
		ir = 0
	}
	a := p.cfg.Alpha
	// Score last epoch's predictions against what arrived.
	if len(p.hist) > 0 {
		e := math.Abs(ir - p.hist[len(p.hist)-1])
		p.naivErr = ewma(p.naivErr, e, a, p.naivN)
		p.naivN++
	}
	p.scale = max(p.scale, ir)
	for _, m := range p.models {
		if m.pred >= 0 {
			m.err = ewma(m.err, math.Abs(ir-m.pred), a, m.seen)
			m.seen++
			m.train(p.hist, ir, p.scale)
		}
	}
	p.hist = append(p.hist, ir)
	if mw := p.maxWindow(); len(p.hist) > 2*mw {
		p.hist = append(p.hist[:0:0], p.hist[len(p.hist)-mw:]...)
	}
	best, bestErr, name := ir, p.naivErr, "naive"
	for _, m := range p.models {
		m.pred = m.predict(p.hist, p.scale)
		// A model must have been scored for a while (as many epochs as
		// the naive one, capped) before it can win.
		if m.pred >= 0 && m.seen >= min(p.naivN, 10) && m.seen > 0 && m.err < bestErr {
			best, bestErr, name = m.pred, m.err, "lr"
		}
	}
	p.last = name
	return best
}

// Winner says whether the last prediction came from a regression ("lr") or
// the naive predictor.
func (p *Predictor) Winner() string { return p.last }

func ewma(old, x, a float64, n int) float64 {
	if n == 0 {
		return x
	}
	return a*old + (1-a)*x
}

// predict returns the model's next rate from the last n observations, or
// -1 while it has fewer than n. The model is linear in the window taken
// relative to its latest rate, x_last + Σ w_i (x_i − x_last) (weights
// summing to one in the raw rates): with all weights zero it is the naive
// predictor, and a level shift moves the prediction with it, so the
// weights learn the shape (averaging noise, following a trend) rather
// than the level, which the raw inputs, all near one another, left
// ill-conditioned.
func (m *lrModel) predict(hist []float64, scale float64) float64 {
	if len(hist) < m.n {
		return -1
	}
	y := m.out(hist[len(hist)-m.n:], scale)
	if math.IsNaN(y) || math.IsInf(y, 0) {
		m.reset()
		return -1
	}
	return max(y*scale, 0)
}

// out is the prediction in units of scale.
func (m *lrModel) out(x []float64, scale float64) float64 {
	last := x[len(x)-1] / scale
	y := last
	for i, v := range x[:len(x)-1] {
		y += m.w[i] * (v/scale - last)
	}
	return y
}

// train takes one normalised (NLMS) step on the squared error of
// predicting target from the window that preceded it; inputs are scaled
// by the running max so one learning rate means the same for 5 and 5,000
// req/s, and the step is divided by the window's energy so it is stable
// for a window of 10 and of 1000 alike.
func (m *lrModel) train(hist []float64, target, scale float64) {
	if len(hist) < m.n {
		return
	}
	x := hist[len(hist)-m.n:]
	last := x[len(x)-1] / scale
	energy := 1e-9
	for _, v := range x[:len(x)-1] {
		d := v/scale - last
		energy += d * d
	}
	g := (m.out(x, scale) - target/scale) / energy
	for i, v := range x[:len(x)-1] {
		m.w[i] -= m.lr * g * (v/scale - last)
	}
	for _, w := range m.w {
		if math.IsNaN(w) || math.IsInf(w, 0) || math.Abs(w) > 1e6 {
			m.reset()
			return
		}
	}
}

func (m *lrModel) reset() {
	clear(m.w)
	m.err, m.seen = 0, 0 // it must prove itself again
}
