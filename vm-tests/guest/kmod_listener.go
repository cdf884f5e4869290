package main

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"

	"github.com/escra-dev/escra/daemon/source"
	"github.com/escra-dev/escra/daemon/source/kmod"
)

// listener owns a multicast socket. Commands go over a second socket:
// a request's acknowledgement must not race a blocked Receive.
type listener struct {
	c       *kmod.Conn
	recs    chan source.Record // period records
	events  chan source.Record // throttle and near events
	oom     chan kmod.OOMRequest
	overrun chan struct{}
	done    chan struct{}
}

func listen(groups ...string) (*listener, error) {
	c, err := kmod.Dial()
	if err != nil {
		return nil, err
	}
	_ = c.SetReadBuffer(8 << 20)
	for _, g := range groups {
		if err := c.Join(g); err != nil {
			c.Close()
			return nil, err
		}
	}
	l := &listener{
		c:       c,
		recs:    make(chan source.Record, 1<<16),
		events:  make(chan source.Record, 1<<12),
		oom:     make(chan kmod.OOMRequest, 1024),
		overrun: make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	go l.loop()
	return l, nil
}

func (l *listener) loop() {
	defer close(l.done)
	for {
		evs, err := l.c.Receive()
		switch {
		case errors.Is(err, unix.ENOBUFS):
			// The socket overflowed: records were lost on the way up.
			select {
			case l.overrun <- struct{}{}:
			default:
			}
			continue
		case errors.Is(err, kmod.ErrMalformed):
			fmt.Println("listener: malformed message:", err)
			continue
		case errors.Is(err, net.ErrClosed), err != nil:
			return
		}
		for _, ev := range evs {
			for _, r := range ev.Records {
				ch := l.recs
				if r.Kind != source.KindPeriod {
					ch = l.events
				}
				select {
				case ch <- r:
				default:
				}
			}
			if ev.OOM != nil {
				select {
				case l.oom <- *ev.OOM:
				default:
				}
			}
		}
	}
}

func (l *listener) close() {
	l.c.Close()
	<-l.done
}

// drainRecords discards buffered records and events.
func (l *listener) drainRecords() {
	for {
		select {
		case <-l.recs:
		case <-l.events:
		default:
			return
		}
	}
}
