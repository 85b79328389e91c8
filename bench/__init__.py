"""timerbench: the `bench` CLI and the local stack (embedded Postgres and Temporal)."""

__version__ = "0.1.0"
