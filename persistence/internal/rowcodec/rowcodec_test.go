package rowcodec

import (
	"testing"
	"time"
)

func TestTimes(t *testing.T) {
	a, b := time.Unix(0, 1_700_000_000_000_000_001), time.Unix(1_800_000_000, 5)
	enc := EncodeTimes([]time.Time{b, {}, a})
	if enc != "0,1700000000000000001,1800000000000000005" {
		t.Fatalf("encoded = %q", enc)
	}
	got, err := DecodeTimes(enc)
	if err != nil || len(got) != 3 || !got[0].IsZero() || !got[1].Equal(a) || !got[2].Equal(b) {
		t.Fatalf("decoded = %v, %v", got, err)
	}
	if EncodeTimes(nil) != "" || EncodeTimes([]time.Time{}) != "" {
		t.Fatal("no times must encode as the empty string")
	}
	if got, err := DecodeTimes(""); got != nil || err != nil {
		t.Fatalf("decode empty = %v, %v", got, err)
	}
	if _, err := DecodeTimes("1,x"); err == nil {
		t.Fatal("decode of garbage succeeded")
	}
}
