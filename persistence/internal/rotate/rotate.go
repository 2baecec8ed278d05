package rotate

import "sync"

// Cursors holds the next key of each channel whose last message named as
// many subscribers as it could. The zero value is ready; it is safe for
// concurrent use (writers publish side by side; two that read the same key
// name the same subscribers, which is harmless).
type Cursors struct {
	mu   sync.Mutex
	next map[string]string
}

// Key returns where the next message queued on channel starts naming its
// subscribers: after this ID ("" for the start).
func (c *Cursors) Key(channel string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next[channel]
}

// Advance records that a message queued on channel, selected after key,
// named the subscribers named, and max is as many as a message names. A
// list shorter than max named every subscriber: the channel needs no
// cursor.
func (c *Cursors) Advance(channel, key string, named []string, max int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(named) < max {
		delete(c.next, channel)
		return
	}
	if c.next == nil {
		c.next = map[string]string{}
	}
	c.next[channel] = Last(key, named)
}

// Last is the last of named in the order they were selected in: the IDs
// after key, then, wrapping, those up to it. It does not depend on the
// order of named.
func Last(key string, named []string) string {
	var after, upTo string
	wrapped := false
	for _, id := range named {
		if id > key {
			after = max(after, id)
		} else {
			wrapped = true
			upTo = max(upTo, id)
		}
	}
	if wrapped {
		return upTo
	}
	return after
}
