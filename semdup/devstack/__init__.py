"""The embedded OpenSearch and Redis for local runs and tests (never used by production clients).

Submodules are imported on use; nothing here starts a process or opens a connection."""
