package pema

import "math"

// Fit is latency against allocation, fitted from an RHDb: what PEMA's
// limitations section (§6) says RHDb is kept for but not used for, and
// what Eq 5 approximates by utilisation. Each service is a
// processor-sharing server of capacity xᵢ under a CPU demand dᵢ (cores),
// whose sojourn time is wᵢ/(xᵢ − dᵢ); the app's p95 is
//
//	r(x) ≈ c + Σᵢ kᵢ / (xᵢ − dᵢ)
//
// with c and kᵢ ≥ 0 fitted by least squares to the recorded (x, r),
// ridge-regularised toward the queueing prior kᵢ⁰ = 3·dᵢ/λ (the p95 of
// an exponential sojourn is 3× its mean, wᵢ = dᵢ/λ), so a service the
// history never cut still has a slope. dᵢ is the most CPU the service
// used in the history (usage never exceeds the quota, so the ample start
// measures it).
type Fit struct {
	C float64   // seconds
	K []float64 // core·seconds
	D []float64 // demand, cores
	N int       // entries used
}

// minSlack keeps the fit finite at and below the demand: a service is
// never modelled with less than this share of its allocation spare.
const minSlack = 0.03

func (f Fit) phi(i int, x float64) float64 {
	return 1 / math.Max(x-f.D[i], minSlack*x)
}

// Predict is r(x).
func (f Fit) Predict(x []float64) float64 {
	r := f.C
	for i := range x {
		r += f.K[i] * f.phi(i, x[i])
	}
	return r
}

// FitRHDb fits r(x) on the entries with n services and a recorded
// utilisation; latencies above cap (3 × the SLO: timeouts, not the
// curve) are clipped to it. ok is false when nothing can be fitted (no
// entry with a utilisation).
func FitRHDb(es []Entry, n int, cap float64) (Fit, bool) {
	f := Fit{K: make([]float64, n), D: make([]float64, n)}
	var use []Entry
	var rps []float64
	for _, e := range es {
		if len(e.X) != n || len(e.U) != n || !(e.R >= 0) {
			continue
		}
		use = append(use, e)
		rps = append(rps, e.RPS)
		for i := range n {
			f.D[i] = math.Max(f.D[i], e.U[i]*e.X[i])
		}
	}
	if len(use) == 0 {
		return f, false
	}
	f.N = len(use)
	lambda := math.Max(mean(rps), 1e-3)
	// Unknowns θ = (c, k₁…kₙ); rows (1, φ₁…φₙ) → min(r, cap).
	m := n + 1
	A := make([][]float64, m)
	for i := range A {
		A[i] = make([]float64, m+1) // normal equations, right-hand side last
	}
	prior := make([]float64, m)
	for i := range n {
		prior[i+1] = 3 * f.D[i] / lambda
	}
	row := make([]float64, m)
	var ymin float64 = math.Inf(1)
	for _, e := range use {
		row[0] = 1
		for i := range n {
			row[i+1] = f.phi(i, e.X[i])
		}
		y := math.Min(e.R, cap)
		ymin = math.Min(ymin, y)
		for a := range m {
			for b := range m {
				A[a][b] += row[a] * row[b]
			}
			A[a][m] += row[a] * y
		}
	}
	// Ridge toward the prior, scaled to the data so that it decides only
	// the directions the history does not.
	var tr float64
	for a := 1; a < m; a++ {
		tr += A[a][a]
	}
	lam := 1e-3 * tr / float64(n)
	if lam <= 0 {
		lam = 1
	}
	for a := 1; a < m; a++ {
		A[a][a] += lam
		A[a][m] += lam * prior[a]
	}
	theta, ok := solve(A)
	if !ok {
		theta = prior
		theta[0] = ymin
	}
	// kᵢ ≥ 0: a service whose fitted slope came out negative (cut
	// together with others, its share of the latency is not identified)
	// keeps the prior's slope; c is then refitted to the level.
	for i := range n {
		f.K[i] = theta[i+1]
		if !(f.K[i] >= 0) {
			f.K[i] = prior[i+1]
		}
	}
	var c float64
	for _, e := range use {
		r := math.Min(e.R, cap)
		for i := range n {
			r -= f.K[i] * f.phi(i, e.X[i])
		}
		c += r / float64(len(use))
	}
	f.C = c
	return f, true
}

// solve is Gaussian elimination with partial pivoting on an augmented
// m×(m+1) matrix.
func solve(A [][]float64) ([]float64, bool) {
	m := len(A)
	for c := range m {
		p := c
		for r := c + 1; r < m; r++ {
			if math.Abs(A[r][c]) > math.Abs(A[p][c]) {
				p = r
			}
		}
		if math.Abs(A[p][c]) < 1e-12 {
			return nil, false
		}
		A[c], A[p] = A[p], A[c]
		for r := c + 1; r < m; r++ {
			k := A[r][c] / A[c][c]
			for j := c; j <= m; j++ {
				A[r][j] -= k * A[c][j]
			}
		}
	}
	x := make([]float64, m)
	for r := m - 1; r >= 0; r-- {
		s := A[r][m]
		for j := r + 1; j < m; j++ {
			s -= A[r][j] * x[j]
		}
		x[r] = s / A[r][r]
		if math.IsNaN(x[r]) || math.IsInf(x[r], 0) {
			return nil, false
		}
	}
	return x, true
}
