package limits

import (
	"testing"

	"github.com/docker/docker/api/types/container"
)

// A container created with --cpus only takes NanoCPUs from docker update
// ("Conflicting options: CPU Period cannot be updated as NanoCPUs has
// already been set"): the reconciler must never send CpuQuota/CpuPeriod
// for it, or it retries forever and Docker's view never follows.
func TestDockerCPUKeepsTheFormTheContainerWasCreatedWith(t *testing.T) {
	for _, tc := range []struct {
		name         string
		cur          Current
		nano         bool
		quota        int64
		period, cpus int64
	}{
		{"quota form", Current{CPUQuotaUs: 30000, CPUPeriodUs: 100000}, false, 30000, 100000, 0},
		{"quota form, unlimited", Current{CPUQuotaUs: -1, CPUPeriodUs: 100000}, false, -1, 100000, 0},
		{"--cpus, Docker's period", Current{CPUQuotaUs: 30000, CPUPeriodUs: 100000}, true, 0, 0, 300_000_000},
		{"--cpus, sub-core quota", Current{CPUQuotaUs: 5000, CPUPeriodUs: 100000}, true, 0, 0, 50_000_000},
		{"--cpus, another period: CPU left out", Current{CPUQuotaUs: 30000, CPUPeriodUs: 50000}, true, 0, 0, 0},
		{"--cpus, unlimited: CPU left out", Current{CPUQuotaUs: -1, CPUPeriodUs: 100000}, true, 0, 0, 0},
	} {
		var res container.Resources
		dockerCPU(&res, tc.cur, tc.nano)
		if res.CPUQuota != tc.quota || res.CPUPeriod != tc.period || res.NanoCPUs != tc.cpus {
			t.Errorf("%s: quota %d period %d nano %d, want %d %d %d", tc.name,
				res.CPUQuota, res.CPUPeriod, res.NanoCPUs, tc.quota, tc.period, tc.cpus)
		}
		if res.NanoCPUs != 0 && (res.CPUQuota != 0 || res.CPUPeriod != 0) {
			t.Errorf("%s: NanoCPUs sent with CpuQuota/CpuPeriod: Docker refuses that", tc.name)
		}
	}
}
