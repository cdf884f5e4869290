// Command escractl is the command line for the controller: deploy specs, list
// apps, containers and hosts, and watch limits follow demand.
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
		fmt.Println("escractl", version.Version)
		return
	}
	fmt.Fprintln(os.Stderr, "escractl: the CLI is not built yet")
	os.Exit(2)
}
