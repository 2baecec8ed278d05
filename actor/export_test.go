package actor

// IsStopping reports whether Stop has begun, so that tests can fire events
// between the start of a shutdown and the moment a start looks at it.
func (s *System) IsStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}
