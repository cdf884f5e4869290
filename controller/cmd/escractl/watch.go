package main

import (
	"bytes"
	"fmt"
	"regexp"
	"time"

	"github.com/escra-dev/escra/controller/adminclient"
)

// watchGet is get -w: it asks every interval and prints the answer again
// whenever it changed, until the context ends (Ctrl-C), which is a clean
// exit. Each print is whole: a table with its header, a JSON value, or a
// YAML stream after "---".
func watchGet(e *env, c *adminclient.Client, what, name string, o *output, every time.Duration) error {
	var last []byte
	printed := false
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		var buf bytes.Buffer
		saved := e.stdout
		e.stdout = &buf
		err := get(e, c, what, name, o)
		e.stdout = saved
		if err != nil {
			if e.ctx.Err() != nil {
				return nil
			}
			return err
		}
		// Ages ("12s ago") change every second: compare without them.
		if cur := stripAges(buf.Bytes()); !printed || !bytes.Equal(cur, last) {
			if printed {
				switch o.format {
				case "yaml":
					fmt.Fprintln(e.stdout, "---")
				case "table", "wide":
					fmt.Fprintln(e.stdout)
				}
			}
			e.stdout.Write(buf.Bytes())
			last, printed = cur, true
		}
		select {
		case <-e.ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// stripAges drops "<duration> ago" cells so a table of hosts does not
// count as changed each second.
func stripAges(b []byte) []byte {
	return agoRE.ReplaceAll(b, []byte("ago"))
}

var agoRE = regexp.MustCompile(`[0-9][0-9hms.µ]* ago`)
