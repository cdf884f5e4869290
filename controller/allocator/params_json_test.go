package allocator

import (
	"encoding/json"
	"testing"
	"time"
)

// A Params written before a field existed decodes with that field's
// default, an explicit value is kept, and a round trip is exact.
func TestParamsJSONDefaultsMissingFields(t *testing.T) {
	// The older format's fields only: no fair_share_on_throttle, no lease_fraction.
	old := `{"window":20,"upsilon":20,"gamma":0.2,"kappa":0.8,"period":100000000,"cpu_floor_us":5000,
		"headroom":0.1,"peak_half_life":0,"min_step_us":100,"oom_step_bytes":67108864,"safe_margin_bytes":52428800}`
	var p Params
	if err := json.Unmarshal([]byte(old), &p); err != nil {
		t.Fatal(err)
	}
	if !p.FairShareOnThrottle {
		t.Error("fair_share_on_throttle missing from the record decoded as false; want its default, true")
	}
	if p.Window != 20 || p.CPUFloorUs != 5000 {
		t.Errorf("explicit fields lost: window %d, cpu floor %d", p.Window, p.CPUFloorUs)
	}

	var off Params
	if err := json.Unmarshal([]byte(`{"fair_share_on_throttle":false,"window":3}`), &off); err != nil {
		t.Fatal(err)
	}
	if off.FairShareOnThrottle || off.Window != 3 || off.Kappa != DefaultParams().Kappa {
		t.Errorf("explicit false or defaults not kept: %+v", off)
	}

	for _, in := range []Params{DefaultParams(), {Window: 1, Upsilon: 2, Gamma: 0, Kappa: 1, Period: time.Second,
		CPUFloorUs: 1000, Headroom: 0, PeakHalfLife: time.Minute, MinStepUs: 0, OOMStepBytes: 4096, SafeMarginBytes: 0,
		LeaseFraction: 0, FairShareOnThrottle: false}} {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var out Params
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		if out != in {
			t.Errorf("round trip of %+v gave %+v", in, out)
		}
	}
	if err := json.Unmarshal([]byte(`{"window":"ten"}`), &p); err == nil {
		t.Error("a malformed field was accepted")
	}
}
