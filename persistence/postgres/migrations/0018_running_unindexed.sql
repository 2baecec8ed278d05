-- A spawned instance is written running and under its node's lease, and
-- most leave both states soon: a chain step ends it, a park makes it
-- waiting, a passivation gives the lease up. Each of those index entries
-- was dead almost as soon as it was written, and each took room until a
-- vacuum: about 140 bytes of a parked instance right after its park went
-- to its running entry in instances_workflow_status_created and 25 to its
-- entries in instances_lease_owner.
--
-- instances_unsettled holds every running instance already, and every
-- leased one (running, compensating or waiting under a lease; an end gives
-- its lease up). So running instances leave
-- instances_workflow_status_created, and instances_lease_owner goes:
--   - listings and counts of a workflow's running instances read
--     instances_unsettled, now by workflow, status and creation time, so
--     that a page of them newest first reads about the page; the loose
--     scan of the store's workflows reads it too;
--   - an owner's leases (RenewLeases, ReleaseLeases) are read from it too;
--   - Runnable reads all of it and keeps the instances of its buckets: it
--     holds the instances active in the cluster, not the parked or ended
--     ones.
-- Its entries grow by the workflow's name and the status; the index holds
-- the instances that are active, not those parked or ended.
DROP INDEX IF EXISTS instances_lease_owner;
DROP INDEX IF EXISTS instances_workflow_status_created;
CREATE INDEX instances_workflow_status_created ON instances (workflow, status, created_at, id) WHERE status <> 'running';
DROP INDEX IF EXISTS instances_unsettled;
CREATE INDEX instances_unsettled ON instances (workflow, status, created_at)
    WHERE status IN ('running', 'compensating') OR (status = 'waiting' AND (lease_owner IS NOT NULL OR cancel_reason <> ''));
