-- instances_unsettled replaces instances_bucket_live as the one index of
-- live instances. It holds the live instances that may need an activation
-- whatever their mailbox holds: running or compensating, or waiting under
-- a lease (its node may have died) or with a cancel request. Runnable
-- reads them here, and finds the waiting instances with mail from the
-- messages themselves, so that a recovery pass costs what needs
-- recovering and the instances currently held, not every parked instance
-- in the store. A passivated instance (waiting, no lease, no cancel
-- request) has no entry in it, which makes a parked instance smaller than
-- before. Counts of live instances read instances_status_created.
--
-- lease_owner and status are in other indexes already and cancel requests
-- are rare, so the predicate makes no update lose HOT that kept it.
DROP INDEX IF EXISTS instances_bucket_live;
CREATE INDEX instances_unsettled ON instances (bucket)
    WHERE status IN ('running', 'compensating') OR (status = 'waiting' AND (lease_owner IS NOT NULL OR cancel_reason <> ''));
