"""The runner process in its pod: the session with the operator, ingest, checkpoints, the log tail."""
