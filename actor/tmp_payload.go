package actor

// checkPayload is replaced by the payload limit work.
func (s *System) checkPayload(what string, b []byte) error { return nil }
