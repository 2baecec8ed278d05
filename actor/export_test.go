package actor

// IsStopping reports whether Stop has begun, so that tests can fire events
// between the start of a shutdown and the moment a start looks at it.
func (s *System) IsStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// RaceHooks are the points where tests land a commit in a race: see
// SetRaceHooks.
type RaceHooks struct {
	BeforePark func(id string) // found nothing for its receives (or knew there was nothing); about to park
	QueuedWake func(id string) // a queued message is about to wake this competing consumer
	Launching  func(id string) // an activation loaded its instance; about to start
	Created    func(id string) // a spawn created its instance here; about to start its activation
}

// SetRaceHooks makes the runtime call h's functions (nil ones are skipped).
func (s *System) SetRaceHooks(h RaceHooks) {
	s.races.Store(&raceHooks{beforePark: h.BeforePark, queuedWake: h.QueuedWake, launching: h.Launching, created: h.Created})
}

// StopActivation stops the live activation of id as a lost lease does,
// leaving the instance as it is; it reports whether there was one.
func (s *System) StopActivation(id string) bool {
	s.mu.Lock()
	a := s.acts[id]
	s.mu.Unlock()
	return a != nil && a.leaseLost()
}

// Waiters is how many Await calls wait for id's end on this node.
func (s *System) Waiters(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters[id])
}

// SetHistoryPage sets how many history events an activation reads at a time.
func (s *System) SetHistoryPage(n int) { s.histPage = n }

// Starting is how many instances this node is about to activate: queued
// for an activator, or loading.
func (s *System) Starting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.starting)
}
