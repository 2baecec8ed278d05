-- instances_status held the live instances by status, with the same
-- predicate as instances_bucket_live: every query that reads one can read
-- the other at the same cost (both lead to the rows), and each was one more
-- index entry to write at every status change (creation, activation,
-- passivation, the end), which is never a HOT update.
DROP INDEX IF EXISTS instances_status;
