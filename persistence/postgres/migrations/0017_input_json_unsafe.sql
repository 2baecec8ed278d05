-- norn_input_json catches a failed conversion in an EXCEPTION block, which
-- opens a subtransaction, and PostgreSQL refuses those in a parallel query
-- ("cannot start subtransactions during a parallel operation"). It was
-- marked PARALLEL SAFE, so an input filter over a table large enough for
-- a parallel plan failed. PARALLEL UNSAFE keeps such queries serial.
ALTER FUNCTION norn_input_json(bytea) PARALLEL UNSAFE;
