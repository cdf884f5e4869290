package server

// refs maps one host's container handles to their refs. Daemons number
// their containers 1, 2, 3, … for the life of a session, so the small
// handles live in a slice indexed by handle: the UDP reader looks one up
// per statistic, in handle order, and a slice walk stays in cache where
// a hash lookup does not. Handles past denseRefs (a session that saw
// thousands of containers come and go) go to a map, so a daemon that
// sends a huge handle costs the controller one map entry, not a slice.
type refs struct {
	dense  []ref // dense[h] is set when dense[h].app != nil
	sparse map[uint32]ref
	n      int
}

// denseRefs bounds the slice: 4,096 refs of 48 bytes, 192 KiB per host.
const denseRefs = 1 << 12

func (t *refs) get(h uint32) (ref, bool) {
	if h < uint32(len(t.dense)) {
		r := t.dense[h]
		return r, r.app != nil
	}
	r, ok := t.sparse[h]
	return r, ok
}

// set stores r (whose app must not be nil) for handle h.
func (t *refs) set(h uint32, r ref) {
	if _, ok := t.get(h); !ok {
		t.n++
	}
	if h < denseRefs {
		if h >= uint32(len(t.dense)) {
			t.dense = append(t.dense, make([]ref, int(h)+1-len(t.dense))...)
		}
		t.dense[h] = r
		return
	}
	if t.sparse == nil {
		t.sparse = map[uint32]ref{}
	}
	t.sparse[h] = r
}

func (t *refs) del(h uint32) {
	if _, ok := t.get(h); !ok {
		return
	}
	t.n--
	if h < uint32(len(t.dense)) {
		t.dense[h] = ref{}
		return
	}
	delete(t.sparse, h)
}

func (t *refs) len() int { return t.n }

// each calls f for every ref, in no set order; f may delete the ref it
// was handed.
func (t *refs) each(f func(h uint32, r ref)) {
	for h, r := range t.dense {
		if r.app != nil {
			f(uint32(h), r)
		}
	}
	for h, r := range t.sparse {
		f(h, r)
	}
}
