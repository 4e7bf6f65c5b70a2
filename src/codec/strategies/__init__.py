"""Hypothesis strategies for users' own property tests.

They need Hypothesis: ``pip install pgwire-mock[hypothesis]``.

- :mod:`codec.strategies.pgoutput`: pgoutput messages per protocol version and whole
  transactions (plain, streamed, two-phase);
- :mod:`codec.strategies.values`: Python values for every built-in type OID the codec
  converts;
- :mod:`codec.strategies.wire`: frontend/backend protocol 3.0 and replication CopyData
  messages.
"""

from codec.strategies.pgoutput import (
    column_values,
    lsns,
    messages,
    relations,
    timestamps,
    transactions,
    tuple_data,
    xids,
)

__all__ = [
    "column_values",
    "lsns",
    "messages",
    "relations",
    "timestamps",
    "transactions",
    "tuple_data",
    "xids",
]
