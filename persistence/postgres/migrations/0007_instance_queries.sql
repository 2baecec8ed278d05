-- Store.ListInstances: each filter it answers from an index reads its page
-- from one range of one of these, newest first, so that a page costs the
-- same at ten instances or ten million. None holds updated_at, which every
-- step changes; status changes only at activation, passivation and the end.
CREATE INDEX instances_created ON instances (created_at, id);
CREATE INDEX instances_status_created ON instances (status, created_at, id);
-- A workflow's instances, one status at a time (a workflow alone is read
-- status by status).
CREATE INDEX instances_workflow_status_created ON instances (workflow, status, created_at, id);
-- Children of a parent; most instances have none, and stay out of it.
CREATE INDEX instances_parent_created ON instances (parent, created_at, id) WHERE parent != '';

-- norn_input_json reads an input as JSON, or NULL if it is not (an input
-- written with another codec), so that a filter on input fields skips such
-- instances instead of failing the whole query.
CREATE FUNCTION norn_input_json(b bytea) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN convert_from(b, 'UTF8')::jsonb;
EXCEPTION WHEN OTHERS THEN
    RETURN NULL;
END
$$;
