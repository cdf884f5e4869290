// Command escrad is the per-host Escra agent: it finds containers labelled
// escra.app=APP, streams their per-period CPU telemetry to the controller,
// forwards OOM requests and applies the limits the controller decides.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/escra-dev/escra/internal/version"
)

func main() {
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println("escrad", version.Version)
		return
	}
	fmt.Fprintln(os.Stderr, "escrad: the host daemon is not built yet")
	os.Exit(2)
}
