package actor

import (
	"context"
	"fmt"
)

// Instance reads one instance's record (status, input, output, failure,
// parent, history length …) without its history or mailbox: what a page
// or a command showing an instance reads first, at the same cost however
// long its history. It fails with ErrNotFound for an unknown ID.
func (s *System) Instance(ctx context.Context, pid PID) (Instance, error) {
	in, err := s.store.Instance(ctx, string(pid))
	if err != nil {
		return Instance{}, fmt.Errorf("norn: instance %s: %w", pid, err)
	}
	return s.instance(in), nil
}
