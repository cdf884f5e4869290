package bpf

import (
	"embed"
	"errors"
)

// obj/ holds the BPF object scripts/bpf.sh builds from c/ at build time
// (make build runs it): git tracks only obj/README.md, so a checkout
// without clang still compiles, and go vet and go test work.
//
//go:embed obj
var objDir embed.FS

// ObjectFile is the object's path in the package (obj/, embedded).
const ObjectFile = "obj/cfs_bpfel.o"

// _CfsBytes is the object bpf2go's loadCfs (cfs_bpfel.go) reads; empty
// when escrad was built without it.
var _CfsBytes, _ = objDir.ReadFile(ObjectFile)

// ErrNotBuilt: this escrad was built without the BPF object.
var ErrNotBuilt = errors.New("bpf backend: object not built; run make build (needs clang)")

// Built says whether the object is embedded in this binary.
func Built() bool { return len(_CfsBytes) > 0 }
