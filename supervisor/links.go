package supervisor

import (
	"encoding/json"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// Links are what an instance watches of the children it spawned linked:
// the failure of one ends the instance too (Erlang's link), unless it
// traps exits, when the child's Down is an ordinary message.
type Links struct {
	Children  []string // linked children spawned so far, in order
	TrapExits bool
}

// Watching reports whether waits must look for a linked child's failure.
func (l Links) Watching() bool { return !l.TrapExits && len(l.Children) > 0 }

// IsChild reports whether id is a linked child.
func (l Links) IsChild(id string) bool {
	for _, c := range l.Children {
		if c == id {
			return true
		}
	}
	return false
}

// Exit finds, among the messages a wait read from the mailbox (arrival
// order), the first Down of a failed linked child that none of the
// waiting receives asks for: the exit that ends the instance at this
// wait. skip reports messages the instance's pending step already took.
func (l Links) Exit(msgs []persistence.Message, skip func(seq int64) bool, waiting []mailbox.Receive) (persistence.Message, mailbox.Down, bool) {
	if !l.Watching() {
		return persistence.Message{}, mailbox.Down{}, false
	}
next:
	for _, m := range msgs {
		if m.Channel != mailbox.DownChannel || skip != nil && skip(m.Seq) {
			continue
		}
		for _, r := range waiting {
			if r.Accepts(mailbox.FromStored(m)) {
				continue next // the workflow waits for this Down itself
			}
		}
		var d mailbox.Down
		// A Down counts only from the instance it names: the runtime
		// sends each in the name of the instance that ended.
		if json.Unmarshal(m.Payload, &d) != nil || persistence.Status(d.Status) != persistence.StatusFailed || !l.IsChild(string(d.PID)) ||
			m.Sender != string(d.PID) {
			continue
		}
		return m, d, true
	}
	return persistence.Message{}, mailbox.Down{}, false
}

// NoProc is the status of a Down for an instance that does not exist.
const NoProc = "noproc"

// DownOf is the Down that a monitor of pid gets at once when it starts
// watching: for an instance that has ended (inst, found) or that does not
// exist (found false). It reports false for an instance still running:
// its Down comes when it ends.
func DownOf(pid mailbox.PID, inst persistence.Instance, found bool) (mailbox.Down, bool) {
	if !found {
		return mailbox.Down{PID: pid, Status: NoProc}, true
	}
	if !inst.Status.Terminal() {
		return mailbox.Down{}, false
	}
	return mailbox.Down{PID: pid, Status: string(inst.Status), Error: inst.Error, Output: inst.Output}, true
}
