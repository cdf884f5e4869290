package spec

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// byteUnits are the memory suffixes a spec accepts: IEC binary (KiB, Ki, ...)
// and SI decimal (KB, K, ...). Docker's lowercase "512m" is not accepted: in a
// spec "m" would read as milli, so it is refused with a hint instead of guessed.
var byteUnits = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"kB", 1e3}, {"K", 1e3}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
	{"B", 1},
}

// ParseBytes reads a memory quantity: a plain number of bytes ("1048576") or a
// number with a unit ("512MiB", "2GiB", "1.5Gi", "100MB").
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty memory quantity")
	}
	num, mult := s, 1.0
	for _, u := range byteUnits {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		if strings.HasSuffix(strings.ToLower(s), "m") || strings.HasSuffix(strings.ToLower(s), "g") {
			return 0, fmt.Errorf("%q is not a memory quantity (write units as MiB, GiB, MB, GB)", s)
		}
		return 0, fmt.Errorf("%q is not a memory quantity (a number of bytes, or a number with KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	b := v * mult
	if b > math.MaxInt64/2 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	if b != math.Trunc(b) {
		return 0, fmt.Errorf("%q is not a whole number of bytes", s)
	}
	return int64(b), nil
}

// ParseCPU reads a CPU quantity in cores: "2", "0.5" or millicores "500m".
func ParseCPU(s string) (float64, error) {
	s = strings.TrimSpace(s)
	mult := 1.0
	num := s
	if strings.HasSuffix(s, "m") {
		num, mult = strings.TrimSuffix(s, "m"), 1e-3
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a CPU quantity (cores like 2 or 0.5, or millicores like 500m)", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	v *= mult
	if v > 1e6 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return v, nil
}

// FormatBytes prints a byte count the short way people read it: 512MiB, 1.5GiB.
func FormatBytes(b int64) string {
	neg := ""
	if b < 0 {
		neg, b = "-", -b
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v := float64(b)
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%s%dB", neg, b)
	}
	if v == math.Trunc(v) || v >= 100 {
		return fmt.Sprintf("%s%.0f%s", neg, v, units[i])
	}
	return fmt.Sprintf("%s%.1f%s", neg, v, units[i])
}
