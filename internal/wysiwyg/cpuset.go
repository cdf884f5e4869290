package wysiwyg

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// CPUSet is a sorted list of distinct CPU numbers.
type CPUSet []int

// NewCPUSet sorts and deduplicates cpus.
func NewCPUSet(cpus ...int) CPUSet {
	s := append(CPUSet(nil), cpus...)
	sort.Ints(s)
	out := s[:0]
	for i, c := range s {
		if i == 0 || c != s[i-1] {
			out = append(out, c)
		}
	}
	return out
}

// Range is the set 0..n-1.
func Range(n int) CPUSet {
	s := make(CPUSet, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// Has reports whether c is in s.
func (s CPUSet) Has(c int) bool {
	i := sort.SearchInts(s, c)
	return i < len(s) && s[i] == c
}

// Equal compares two sets.
func (s CPUSet) Equal(t CPUSet) bool {
	if len(s) != len(t) {
		return false
	}
	for i := range s {
		if s[i] != t[i] {
			return false
		}
	}
	return true
}

// Union returns s ∪ t.
func (s CPUSet) Union(t CPUSet) CPUSet {
	return NewCPUSet(append(append([]int(nil), s...), t...)...)
}

// Intersect returns s ∩ t.
func (s CPUSet) Intersect(t CPUSet) CPUSet {
	var out CPUSet
	for _, c := range s {
		if t.Has(c) {
			out = append(out, c)
		}
	}
	return out
}

// String is the kernel's list format (cpuset.cpus): "0-2,5".
func (s CPUSet) String() string {
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(s[j]))
		}
		i = j + 1
	}
	return b.String()
}

// ParseCPUSet reads the kernel's list format ("0-2,5", "" is empty).
func ParseCPUSet(v string) (CPUSet, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, nil
	}
	var out []int
	for _, part := range strings.Split(v, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("cpu list %q: bad cpu %q", v, lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("cpu list %q: bad range %q", v, part)
			}
		}
		if b-a > 1<<16 {
			return nil, fmt.Errorf("cpu list %q: range too large", v)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return NewCPUSet(out...), nil
}
