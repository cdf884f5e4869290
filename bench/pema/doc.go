// Package pema is the PEMA comparison's bench side: the baselines (RULE,
// OPTM), the app's cgroups and their sampler, and the SVG plots.
// bench/cmd/bench-pema drives it on the app of internal/pemaapp.
package pema
