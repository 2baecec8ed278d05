-- instances_status_created held every instance a second time in the order
-- of instances_workflow_status_created without its leading workflow. A
-- status is a key that changes (creation, park, wake, end), so each change
-- wrote an entry to both: a parked instance carried about 270 bytes of it
-- right after its park, and each spawn and end paid one more index insert.
-- A query without a workflow now finds the store's workflows by a loose
-- scan of instances_workflow_status_created (one index probe per workflow)
-- and reads one range of it per workflow and status: listings, live counts
-- and purges.
DROP INDEX IF EXISTS instances_status_created;
