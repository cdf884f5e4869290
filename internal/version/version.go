// Package version holds the build's version, set by the Makefile through
// -ldflags "-X github.com/escra-dev/escra/internal/version.Version=...".
package version

// Version is the release or git description of this build.
var Version = "dev"
