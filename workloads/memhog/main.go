// Command memhog allocates memory in steps, touching every page, then exits
// 0. Tests run it in a container with a memory limit below its total to
// make the container hit its limit (Escra §IV-C OOM events).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	total := flag.Int("mib", 64, "MiB to allocate in total")
	step := flag.Int("step-mib", 4, "MiB per step")
	pause := flag.Duration("pause", 0, "sleep between steps")
	hold := flag.Duration("hold", 0, "keep the memory this long before exiting")
	waitSig := flag.Bool("wait-usr1", false, "allocate only after SIGUSR1 (lets a test arm its OOM trap first)")
	flag.Parse()
	if *waitSig {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGUSR1)
		fmt.Println("memhog: waiting for SIGUSR1")
		<-ch
	}
	if *total < 0 || *step <= 0 {
		fmt.Fprintln(os.Stderr, "memhog: -mib must be >= 0 and -step-mib > 0")
		os.Exit(2)
	}
	var keep [][]byte
	for done := 0; done < *total; done += *step {
		n := min(*step, *total-done)
		b := make([]byte, n<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		keep = append(keep, b)
		fmt.Printf("memhog: %d MiB\n", done+n)
		if *pause > 0 {
			time.Sleep(*pause)
		}
	}
	time.Sleep(*hold)
	fmt.Printf("memhog: done, %d chunks\n", len(keep))
}
