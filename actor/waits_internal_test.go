package actor

import (
	"reflect"
	"testing"
	"time"

	"github.com/nornlabs/norn/norntype"
)

// What an instance waits for round-trips through its stored form, rows
// written in the JSON form still read, and a damaged form reads as an
// error, never as a wait.
func TestStoredWaits(t *testing.T) {
	t.Parallel()
	due := time.Unix(0, 1796501750333435264)
	for _, p := range []parkedOn{
		{Hist: 2},
		{Hist: -1, Seen: -(1 << 40), Waits: []norntype.Wait{{Kind: norntype.WaitTimer, Name: "sleep:0", Due: time.Unix(0, -5)}}},
		{Hist: 2, Waits: []norntype.Wait{{Kind: norntype.WaitReceive, Name: "receive:1", Types: []string{"int"},
			Channel: "wake-62d1cd84", OnChannel: true, Strict: true}}},
		{Hist: 90, Seen: 1 << 40, Waits: []norntype.Wait{
			{Kind: norntype.WaitReceive, Name: "receive:7", Types: []string{"order.v2", "order"}, From: "shop-1",
				Filtered: true, Due: due},
			{Kind: norntype.WaitReceive, Name: "receive:8", OnChannel: true}, // plain sends by PID
			{Kind: norntype.WaitTimer, Name: "sleep:3", Due: due},
			{Kind: norntype.WaitChild, Name: "child-9", Types: []string{downType}, Channel: "$down", OnChannel: true, From: "child-9"},
			{Kind: norntype.WaitActivity, Name: "charge:1", Attempt: 4, Due: due.Add(-time.Hour)},
		}},
	} {
		b := p.encode()
		got, err := decodeParked(b)
		if err != nil {
			t.Fatalf("decode(encode(%+v)): %v", p, err)
		}
		if p.Waits == nil {
			p.Waits = []norntype.Wait{}
		}
		if !reflect.DeepEqual(got, p) {
			t.Errorf("decode(encode(p)) =\n%+v\nwant\n%+v", got, p)
		}
		// Every shorter prefix and one byte more are damaged forms.
		for n := range b {
			if _, err := decodeParked(b[:n]); err == nil {
				t.Errorf("%d of %d bytes decoded", n, len(b))
			}
		}
		if _, err := decodeParked(append(b[:len(b):len(b)], 0)); err == nil {
			t.Error("a trailing byte decoded")
		}
	}

	// The idler of the bench parks on one typed receive on a channel: its
	// row holds this form twice right after it passivates.
	idler := parkedOn{Hist: 2, Waits: []norntype.Wait{{Kind: norntype.WaitReceive, Name: "receive:1",
		Types: []string{"int"}, Channel: "wake-62d1cd84", OnChannel: true, Strict: true}}}
	if n := len(idler.encode()); n > 40 {
		t.Errorf("a receive on a channel takes %d bytes, want at most 40", n)
	}

	old := `{"w":[{"k":"r","n":"receive:1","t":["int"],"c":"wake-62d1cd84","x":true},{"k":"t","n":"sleep:1","d":1796501750333435264}],"s":5,"h":2}`
	got, err := decodeParked([]byte(old))
	want := parkedOn{Hist: 2, Seen: 5, Waits: []norntype.Wait{idler.Waits[0], {Kind: norntype.WaitTimer, Name: "sleep:1", Due: due}}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("the JSON form read as %+v, %v; want %+v", got, err, want)
	}

	for _, bad := range [][]byte{nil, {}, {2}, {'{'}, {parkedBinary, 4, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}} {
		if p, err := decodeParked(bad); err == nil {
			t.Errorf("%q decoded as %+v", bad, p)
		}
	}
}
