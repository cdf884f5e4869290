package server

import (
	"fmt"

	"github.com/escra-dev/escra/controller/allocator"
)

// CheckApp is DefineApp's server-side dry run (PUT /v1/apps/{name}?dryRun=1,
// escractl apply --dry-run=server): every check DefineApp makes, and the
// app as GET /v1/apps would then show it, with nothing stored or applied.
func (s *Server) CheckApp(spec AppSpec) (AppState, error) {
	if err := spec.Validate(); err != nil {
		return AppState{}, err
	}
	b := allocator.Budget{CPUCores: spec.CPUCores, MemoryBytes: spec.MemoryBytes, Sigma: spec.Sigma}
	if err := b.Validate(); err != nil {
		return AppState{}, fmt.Errorf("app %s: %w", spec.Name, err)
	}
	p := spec.EffectiveParams(s.cfg.Params)
	if err := p.Validate(); err != nil {
		return AppState{}, fmt.Errorf("app %s: %w", spec.Name, err)
	}
	pol := s.policy(spec.Name)
	if spec.Policy != "" {
		pol, _ = allocator.PolicyByName(spec.Policy) // checked by Validate
	}
	out := AppState{Name: spec.Name, CPUCores: b.CPUCores, MemoryBytes: b.MemoryBytes, Sigma: b.Sigma,
		Params: p, Spec: spec.Spec, CPUUnallocatedCores: b.CPUCores, MemoryUnallocatedBytes: b.MemoryBytes}
	if pol != nil {
		out.Policy = pol.Name()
	} else {
		out.Policy = allocator.Escra{}.Name() // the allocator's default
	}
	out.Mode = spec.Mode
	if out.Mode == "" {
		out.Mode = "enforce"
	}
	s.mu.RLock()
	a := s.apps[spec.Name]
	s.mu.RUnlock()
	if a == nil {
		return out, nil
	}
	st := a.Snapshot()
	if (st.Params != p || (pol != nil && st.Policy != pol.Name())) && len(st.Members) > 0 {
		return AppState{}, fmt.Errorf("app %s: parameters and policy can change only while it has no members", spec.Name)
	}
	if pol == nil {
		out.Policy = st.Policy
	}
	// The members keep what they hold until the allocator's next decisions.
	for _, cur := range s.Snapshot().Apps {
		if cur.Name == spec.Name {
			out.Members, out.PendingOOMs = cur.Members, cur.PendingOOMs
			out.CPUAllocatedCores, out.MemoryAllocatedBytes = cur.CPUAllocatedCores, cur.MemoryAllocatedBytes
			out.CPUUnallocatedCores = max(b.CPUCores-cur.CPUAllocatedCores-cur.CPULeasedCores, 0)
			out.MemoryUnallocatedBytes = max(b.MemoryBytes-cur.MemoryAllocatedBytes, 0)
		}
	}
	return out, nil
}

// dryRun reports whether a request asks for a dry run (?dryRun=1, or
// true, or All as the Kubernetes API spells it).
func dryRun(q string) bool {
	switch q {
	case "1", "true", "All", "all":
		return true
	}
	return false
}
