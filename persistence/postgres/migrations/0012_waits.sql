-- What an instance is parked on (the runtime's description: the message
-- types and filters of its receives, its timers, the children it awaits),
-- so that a tool without the workflow's code can show it. Not indexed, so
-- that the updates that set it stay HOT.
ALTER TABLE instances ADD COLUMN waits bytea;
