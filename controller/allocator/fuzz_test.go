package allocator

import (
	"encoding/binary"
	"testing"
)

// FuzzCPU decodes arbitrary bytes into a sequence of statistics for a
// three-member app and checks the invariants after each decision.
func FuzzCPU(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21})
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, _ := NewBooks("f", Budget{CPUCores: 1.5, MemoryBytes: 1 << 30}, DefaultParams(), nil)
		for k := Key(1); k <= 3; k++ {
			a.Join(Join{Key: k, HostMaxUs: 100000})
		}
		for len(data) >= 11 {
			k := Key(data[0]%4 + 1) // 4 is unknown
			s := Stat{Seq: uint64(data[1]), PeriodUs: int64(int32(binary.LittleEndian.Uint32(data[2:]))),
				UnusedUs: int64(int32(binary.LittleEndian.Uint32(data[6:]))), Throttled: data[10]&1 == 1,
				QuotaUs: int64(int8(data[10] >> 1))}
			data = data[11:]
			a.CPU(k, s)
			var sum int64
			for _, m := range a.Members() {
				if m.QuotaUs > m.HostMaxUs || m.QuotaUs < a.floorUs(a.Len()) {
					t.Fatalf("quota %d out of [floor, host max]", m.QuotaUs)
				}
				sum += m.QuotaUs
			}
			if sum > a.OmegaUs() {
				t.Fatalf("Σ %d > Ω %d", sum, a.OmegaUs())
			}
		}
	})
}
