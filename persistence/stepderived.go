package persistence

import "time"

// What a driver derives from a step, written once so that the drivers
// agree. Each is part of the specification on Step.

// Target is the instance the step writes and the lease epoch it is fenced
// by: Create.ID and Create.LeaseEpoch for a step that creates (Instance and
// Epoch are then ignored), else Instance and Epoch.
func (s *Step) Target() (id string, epoch int64) {
	if s.Create != nil {
		return s.Create.ID, s.Create.LeaseEpoch
	}
	return s.Instance, s.Epoch
}

// AppendOnly reports whether the step changes nothing of its instance's row
// but the history length (and the updated time): no status, lease,
// restart or run change. Most steps are.
func (s *Step) AppendOnly() bool {
	return !s.ResetHistory && s.Status == "" && !s.ReleaseLease && !s.IncRestarts && s.RestartLog == nil && s.TakeLease == ""
}

// UpdatesInstance reports whether the step updates an existing instance's
// row under the fencing check. A step without an instance does not; a step
// that creates does only if it does more than append (see AppendOnly) and
// also appends history or sets Status: the insert writes all else.
func (s *Step) UpdatesInstance() bool {
	if s.Create == nil {
		return s.Instance != ""
	}
	return !s.AppendOnly() && (len(s.History) > 0 || s.Status != "")
}

// ExpectHistoryLen is the stored history length the step requires, or -1
// for none: 0 for a step that creates, History[0].Seq for one that appends
// without ResetHistory.
func (s *Step) ExpectHistoryLen() int64 {
	switch {
	case s.Create != nil:
		return 0
	case len(s.History) > 0 && !s.ResetHistory:
		return s.History[0].Seq
	}
	return -1
}

// SetsOutput reports whether the step replaces the stored Output and Error:
// when it sets a Status that is terminal, or with an Output or Error.
func (s *Step) SetsOutput() bool {
	return s.Status != "" && (s.Status.Terminal() || s.Output != nil || s.Error != "")
}

// ReleasesLease reports whether the step clears the lease: ReleaseLease, or
// a terminal Status.
func (s *Step) ReleasesLease() bool { return s.ReleaseLease || s.Status.Terminal() }

// CreateStatus is the status a step that creates gives its instance:
// Create.Status, running if empty.
func (s *Step) CreateStatus() Status {
	if s.Create.Status == "" {
		return StatusRunning
	}
	return s.Create.Status
}

// CreateRestarts is the RecentRestarts a step that creates gives its
// instance: RestartLog when set, else Create.RecentRestarts.
func (s *Step) CreateRestarts() []time.Time {
	if s.RestartLog != nil {
		return s.RestartLog
	}
	return s.Create.RecentRestarts
}

// CreateHistoryLen is the history length the insert of a created instance
// writes: the whole History when the step is AppendOnly (no update
// follows), else 0, the update then adding it.
func (s *Step) CreateHistoryLen() int64 {
	if s.AppendOnly() {
		return int64(len(s.History))
	}
	return 0
}
