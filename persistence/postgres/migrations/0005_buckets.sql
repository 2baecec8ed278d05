-- Buckets: each instance is in bucket persistence.BucketOf(id), and each
-- timer in its instance's bucket. A cluster node owns a set of buckets and
-- reads the runnable instances and due timers of those buckets only.
-- SQL cannot compute the bucket (FNV-1a of the ID), so rows written before
-- this migration start at -1 and Open fills in their buckets, in chunks,
-- after migrating. Until then a bucket set does not select them; reading
-- every bucket (nil) does. The constant default adds the columns without
-- rewriting the tables.
ALTER TABLE instances ADD COLUMN bucket INTEGER NOT NULL DEFAULT -1;
ALTER TABLE timers ADD COLUMN bucket INTEGER NOT NULL DEFAULT -1;

-- Runnable over a bucket set: the live instances of each bucket, in the
-- order Runnable returns them.
CREATE INDEX instances_bucket_live ON instances (bucket, updated_at) WHERE status IN ('running', 'waiting', 'compensating');
-- DueTimers over a bucket set: each bucket's timers by due time. It also
-- finds the timers whose bucket is still to be filled in (-1).
CREATE INDEX timers_bucket_due ON timers (bucket, due);
-- The instances whose bucket is still to be filled in, so that Open finds
-- them without reading the whole table; empty once they are.
CREATE INDEX instances_unbucketed ON instances (id) WHERE bucket < 0;
