-- The live-instance predicate as three comparisons instead of an IN list:
-- SQLite checks a partial index's predicate at every insert and status
-- change, and it evaluates an IN list of three or more constants through a
-- temporary table it builds each time. Queries that read this index repeat
-- the predicate word for word (SQLite's condition for using a partial
-- index).
DROP INDEX instances_bucket_live;
CREATE INDEX instances_bucket_live ON instances(bucket) WHERE status = 'running' OR status = 'waiting' OR status = 'compensating';
