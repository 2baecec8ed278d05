-- instances_status held the live instances by status, with the same
-- predicate as instances_bucket_live: every query that reads one can read
-- the other at the same cost (both lead to the rows), and each was one more
-- index entry to delete and insert at every status change (creation,
-- activation, passivation, the end).
DROP INDEX instances_status;
