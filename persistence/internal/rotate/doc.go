// Package rotate keeps, for each channel, where the next message queued
// there starts naming its competing subscribers, so that the bounded list
// each message names (persistence.MaxQueuedSubscribers) moves on through
// all of them in ID order instead of naming the same few every time.
//
// A driver reads the next key before a publish, selects the first
// subscribers after it in ID order (wrapping to the start), and reports
// what it named after the statement:
//
//	key := cursors.Key(channel)
//	// SELECT ... WHERE instance_id > key ORDER BY instance_id LIMIT max,
//	// then those <= key, up to max in all
//	cursors.Advance(channel, key, named, max)
package rotate
