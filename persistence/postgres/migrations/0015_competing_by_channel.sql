-- subscriptions_competing lists each channel's competing subscribers in ID
-- order. A message queued on a channel names a bounded number of them to
-- wake, the next ones in turn after those the previous message named
-- (persistence.MaxQueuedSubscribers): with this index that is a short
-- range read, whatever the number of consumers, where
-- subscriptions_channel would have the publish read every one of them.
-- Broadcast subscriptions, which parked instances hold by the million, are
-- not in it.
CREATE INDEX subscriptions_competing ON subscriptions (channel, instance_id) WHERE mode = 'competing';
