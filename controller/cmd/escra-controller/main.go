// Command escra-controller runs the Distributed Containers: their global
// pools and the resource allocator that decides every container's limits
// from the daemons' telemetry and OOM requests.
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
		fmt.Println("escra-controller", version.Version)
		return
	}
	fmt.Fprintln(os.Stderr, "escra-controller: the controller is not built yet")
	os.Exit(2)
}
