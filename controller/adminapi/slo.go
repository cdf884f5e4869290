package adminapi

import "github.com/escra-dev/escra/controller/spec"

// SLO is the pema policy's latency objective (PEMA), as the spec
// defines it (controller/spec).
type SLO = spec.SLO
