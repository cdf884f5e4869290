package events

import (
	"testing"
	"time"
)

func TestHistoryKeepsLatestPerGroupInTimeOrder(t *testing.T) {
	var h Hub
	h.Keep(3)
	t0 := time.Now()
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Millisecond) }
	// Many limit changes must not push the rare join out.
	h.Publish(Event{Time: at(1), App: "a", Kind: "join"})
	for i := 2; i < 10; i++ {
		h.Publish(Event{Time: at(i), App: "a", Kind: "limits"})
	}
	h.Publish(Event{Time: at(10), App: "b", Kind: "oom-verdict"})
	got := h.Since("", t0)
	var kinds []string
	for i, e := range got {
		kinds = append(kinds, e.Kind)
		if i > 0 && e.Time.Before(got[i-1].Time) {
			t.Fatalf("out of time order: %+v", got)
		}
	}
	if len(got) != 5 || got[0].Kind != "join" || got[4].Kind != "oom-verdict" || !got[1].Time.Equal(at(7)) {
		t.Fatalf("kept %v", kinds)
	}
	if a := h.Since("b", t0); len(a) != 1 || a[0].App != "b" {
		t.Fatalf("app filter: %+v", a)
	}
	if late := h.Since("", at(9)); len(late) != 1 {
		t.Fatalf("since filter: %+v", late)
	}
}

// A subscriber that asks for history gets it, then every later event,
// none twice.
func TestSubscribeSinceNoGapNoDuplicate(t *testing.T) {
	var h Hub
	h.Keep(100)
	t0 := time.Now().Add(-time.Second)
	h.Publish(Event{Time: time.Now(), App: "a", Kind: "join"})
	past, ch, cancel := h.SubscribeSince("a", t0)
	defer cancel()
	h.Publish(Event{Time: time.Now(), App: "a", Kind: "leave"})
	if len(past) != 1 || past[0].Kind != "join" {
		t.Fatalf("past %+v", past)
	}
	select {
	case e := <-ch:
		if e.Kind != "leave" {
			t.Fatalf("live %+v", e)
		}
	case <-time.After(time.Second):
		t.Fatal("no live event")
	}
	select {
	case e := <-ch:
		t.Fatalf("extra event %+v", e)
	default:
	}
}

func TestNoHistoryNoCost(t *testing.T) {
	var h Hub
	if h.Active() {
		t.Fatal("a hub without history or subscribers is active")
	}
	h.Publish(Event{Kind: "join"})
	if len(h.Since("", time.Time{})) != 0 {
		t.Fatal("kept without Keep")
	}
}
