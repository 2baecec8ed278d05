-- The live instances of a bucket, without updated_at: every step sets
-- updated_at, so an index holding it was rewritten on every step (an index
-- entry deleted and inserted), for an order Runnable never read from it (it
-- sorts the few instances it returns). Now a step that does not change an
-- instance's status or lease leaves the instance indexes alone.
DROP INDEX instances_bucket_live;
CREATE INDEX instances_bucket_live ON instances(bucket) WHERE status IN ('running', 'waiting', 'compensating');
