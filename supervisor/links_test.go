package supervisor_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/supervisor"
)

func TestRestartKeepsTheLogWithinThePeriod(t *testing.T) {
	t.Parallel()
	p := supervisor.RestartPolicy{MaxRestarts: 2, Period: time.Minute, Backoff: supervisor.Exponential(time.Second, 2, time.Minute, 0)}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	old, recent := now.Add(-time.Hour), now.Add(-time.Second)
	d, keep, ok := p.Restart([]time.Time{old, recent}, now)
	if !ok || d != 2*time.Second || len(keep) != 2 || !keep[0].Equal(recent) || !keep[1].Equal(now) {
		t.Fatalf("Restart = %v, %v, %v", d, keep, ok)
	}
	if _, keep, ok := p.Restart(keep, now.Add(time.Second)); ok || keep != nil {
		t.Fatalf("a third restart within a minute: %v, %v", keep, ok)
	}
}

func down(t *testing.T, seq int64, pid, status string) persistence.Message {
	t.Helper()
	b, err := json.Marshal(mailbox.Down{PID: mailbox.PID(pid), Status: status, Error: "boom"})
	if err != nil {
		t.Fatal(err)
	}
	return persistence.Message{Seq: seq, ID: pid + "-down", Channel: mailbox.DownChannel, Sender: pid, Payload: b}
}

// forged is m sent by someone else than the instance its Down names.
func forged(m persistence.Message) persistence.Message {
	m.Sender = "mallory"
	return m
}

func TestLinkedExit(t *testing.T) {
	t.Parallel()
	links := supervisor.Links{Children: []string{"p/child:1", "p/child:2"}}
	msgs := []persistence.Message{
		{Seq: 1, Channel: "mail"},
		down(t, 2, "p/child:1", "completed"),      // a child that ended well ends nothing
		down(t, 3, "stranger", "failed"),          // not our child
		forged(down(t, 4, "p/child:1", "failed")), // not sent by the child it names
		down(t, 5, "p/child:2", "failed"),
	}
	m, d, ok := links.Exit(msgs, nil, nil)
	if !ok || m.Seq != 5 || d.PID != "p/child:2" || d.Error != "boom" {
		t.Fatalf("Exit = %+v, %+v, %v", m, d, ok)
	}
	// Taken by the pending step already, or asked for by a waiting receive:
	// no exit.
	if _, _, ok := links.Exit(msgs, func(seq int64) bool { return seq == 5 }, nil); ok {
		t.Fatal("an exit the pending step took ends the instance again")
	}
	awaiting := mailbox.Receive{Spec: mailbox.NewSpec(mailbox.OnChannel(mailbox.DownChannel), mailbox.From("p/child:2"))}
	if _, _, ok := links.Exit(msgs, nil, []mailbox.Receive{awaiting}); ok {
		t.Fatal("a Down the workflow waits for ended it")
	}
	links.TrapExits = true
	if _, _, ok := links.Exit(msgs, nil, nil); ok || links.Watching() {
		t.Fatal("a trapped exit ended the instance")
	}
}

func TestDownOf(t *testing.T) {
	t.Parallel()
	if d, ok := supervisor.DownOf("gone", persistence.Instance{}, false); !ok || d.Status != supervisor.NoProc {
		t.Fatalf("missing instance: %+v, %v", d, ok)
	}
	if _, ok := supervisor.DownOf("x", persistence.Instance{Status: persistence.StatusWaiting}, true); ok {
		t.Fatal("a waiting instance has no Down yet")
	}
	d, ok := supervisor.DownOf("x", persistence.Instance{Status: persistence.StatusFailed, Error: "e", Output: []byte("o")}, true)
	if !ok || d.Status != "failed" || d.Error != "e" || string(d.Output) != "o" {
		t.Fatalf("ended instance: %+v, %v", d, ok)
	}
}
