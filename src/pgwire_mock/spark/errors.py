"""The errors the Spark side raises."""

from __future__ import annotations

__all__ = ["ApplyError", "SchemaChangeError", "SparkSideError", "StreamStateError"]


class SparkSideError(Exception):
    """Root of the errors the Spark side raises."""


class SchemaChangeError(SparkSideError):
    """A table's Relation message changed mid-stream (DDL): one schema per read."""


class StreamStateError(SparkSideError):
    """Messages in an order no walsender sends (a change outside a transaction, ...),
    or a tuple whose column count disagrees with its Relation message."""


class ApplyError(SparkSideError):
    """A batch that cannot be applied faithfully (a TOAST value with no row to take it
    from, an update or delete on a table without a replica identity...)."""
