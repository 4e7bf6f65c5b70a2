"""Synthetic pgoutput change streams for load tests, from a declarative spec.

>>> from pgwire_mock.synth import Shard, Synth, parse_spec
>>> spec = parse_spec('''
... tables:
...   - name: public.users
...     columns: [{name: id, type: int8, key: true}, {name: name, type: text}]
... ''')
>>> synth = Synth(spec, seed=7, changes=100)
>>> whole = list(synth.stream())
>>> whole == [e for k in range(3) for e in synth.stream(Shard(k, 3))]
True

Every event is a pure function of (spec, seed, changes, position), so shards are
generated independently; ``docs/synth.md`` documents the spec and the guarantees.
"""

from pgwire_mock.synth.generator import InitialRows, Shard, StreamItem, Synth, SynthError
from pgwire_mock.synth.output import snapshot_lines, write_expected, write_recording
from pgwire_mock.synth.spec import (
    ColumnSpec,
    LargeSpec,
    MessageSpec,
    OutputSpec,
    Spec,
    SpecError,
    TableSpec,
    load_spec,
    parse_spec,
)
from pgwire_mock.synth.state import ExpectedState, StateDelta, TableDelta

__all__ = [
    "ColumnSpec",
    "ExpectedState",
    "InitialRows",
    "LargeSpec",
    "MessageSpec",
    "OutputSpec",
    "Shard",
    "Spec",
    "SpecError",
    "StateDelta",
    "StreamItem",
    "Synth",
    "SynthError",
    "TableDelta",
    "TableSpec",
    "load_spec",
    "parse_spec",
    "snapshot_lines",
    "write_expected",
    "write_recording",
]
