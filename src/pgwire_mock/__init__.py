"""pgwire-mock: a fake PostgreSQL walsender for testing change-data-capture consumers."""

__version__ = "0.1.0"
