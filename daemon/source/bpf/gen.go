package bpf

// The committed cfs_bpfel.go/.o are generated from c/cfs.bpf.c and c/cfs.h
// (in their own directory: Go refuses .c files in a package without cgo);
// builds need no clang. Regenerate with `make bpf` (clang, llvm and
// libbpf-dev from scripts/setup.sh); TestObjectFresh (layout_test.go) checks that cfs.sum,
// written with the object, still matches the sources.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type escra_rec -type escra_stats -type escra_group cfs c/cfs.bpf.c -- -Ic
//go:generate sh -c "sha256sum c/cfs.bpf.c c/cfs.h > cfs.sum"
