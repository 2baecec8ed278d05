-- The live instances of a bucket, without updated_at: every step sets
-- updated_at, and an index holding it made every step's UPDATE of the
-- instance a non-HOT update, which writes a new entry into each of the
-- table's indexes. Runnable sorts the few instances it returns and never
-- read that order from the index. Now a step that changes neither status
-- nor lease is a HOT update, given free space in the row's page: the
-- fillfactor leaves some (it applies to pages written from now on).
DROP INDEX instances_bucket_live;
CREATE INDEX instances_bucket_live ON instances (bucket) WHERE status IN ('running', 'waiting', 'compensating');
ALTER TABLE instances SET (fillfactor = 80);
