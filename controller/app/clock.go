package app

import (
	"sync"
	"time"
)

// periodClock is one ticker per allocator period shared by every app of
// the process. Each app's lease and memory-credit round used to have its
// own ticker; with many apps that is one idle-to-busy wake-up of the
// process per app per period (scheduler, sysmon and a thread wake each
// time), which cost more than the rounds themselves. One ticker wakes
// them all in the same instant.
type periodClock struct {
	mu   sync.Mutex
	subs map[time.Duration]*clockGroup
}

type clockGroup struct {
	apps map[chan struct{}]struct{}
	stop chan struct{}
}

var sharedClock = &periodClock{subs: map[time.Duration]*clockGroup{}}

// subscribe returns a channel that gets a tick every period, and the
// function that ends the subscription. A tick the app has not taken yet
// is not doubled (capacity 1), as with a time.Ticker.
func (c *periodClock) subscribe(period time.Duration) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	c.mu.Lock()
	g := c.subs[period]
	if g == nil {
		g = &clockGroup{apps: map[chan struct{}]struct{}{}, stop: make(chan struct{})}
		c.subs[period] = g
		go c.run(period, g)
	}
	g.apps[ch] = struct{}{}
	c.mu.Unlock()
	return ch, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(g.apps, ch)
		if len(g.apps) == 0 && c.subs[period] == g {
			delete(c.subs, period)
			close(g.stop)
		}
	}
}

func (c *periodClock) run(period time.Duration, g *clockGroup) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		c.mu.Lock()
		for ch := range g.apps {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		c.mu.Unlock()
	}
}
