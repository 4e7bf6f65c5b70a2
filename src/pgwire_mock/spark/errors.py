"""The errors the Spark side raises."""

from __future__ import annotations

__all__ = ["SchemaChangeError", "SparkSideError", "StreamStateError"]


class SparkSideError(Exception):
    """Root of the errors the Spark side raises."""


class SchemaChangeError(SparkSideError):
    """A table's Relation message changed mid-stream (DDL): one schema per read."""


class StreamStateError(SparkSideError):
    """Messages in an order no walsender sends (a change outside a transaction, ...),
    or a tuple whose column count disagrees with its Relation message."""
