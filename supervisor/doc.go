// Package supervisor holds Norn's failure decisions, as pure logic that the
// runtime drives: how activities are retried (RetryPolicy, with exponential
// back-off, jitter, attempt and duration limits, and errors marked Terminal
// that are never retried), how failed activations are restarted
// (RestartPolicy: Erlang's restart intensity, at most MaxRestarts within
// Period, with back-off between them, counted over a log the store keeps),
// which linked child's failure ends its parent (Links), and the Down a
// monitor gets for an instance that has already ended (DownOf).
//
//	policy := supervisor.Exponential(time.Second, 2, time.Minute, 5)
//	for attempt := 1; ; attempt++ {
//		err := try()
//		d, retry := policy.Next(attempt, time.Since(start), err)
//		if !retry { return err }
//		time.Sleep(d)
//	}
package supervisor
