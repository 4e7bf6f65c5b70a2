"""The Spark side: pgoutput streams as Arrow batches, a Spark data source, and applying
changes to Parquet and Delta Lake tables. Needs the ``spark`` extra.

>>> import pgwire_mock.spark
>>> pgwire_mock.spark.register(spark)                                   # doctest: +SKIP
>>> spark.read.format("pgoutput").option("path", "t.jsonl").option("table", "public.t").load()
>>> spark.readStream.format("pgoutput").option("dsn", dsn).option("slot", "s")  # doctest: +SKIP

The names below are imported on first use: Spark's streaming source runner and its
Python workers import this package to unpickle the data source, and need neither
``apply`` (deltalake, pandas) nor the rest; importing them all cost each fresh runner
~0.3 s before its first batch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pgwire_mock.spark.apply import (
        ApplyError,
        ApplyResult,
        DeltaTarget,
        ParquetTarget,
        apply_changes,
        foreach_batch,
        parquet_target_path,
        read_parquet_target,
        state_schema,
    )
    from pgwire_mock.spark.decode import (
        KEY_METADATA,
        METADATA_FIELDS,
        SNAPSHOT_OP,
        ChangeDecoder,
        DecodeOptions,
        SchemaChangeError,
        SparkSideError,
        StreamStateError,
        decode_stream,
        table_schema,
    )
    from pgwire_mock.spark.source import PgOutputDataSource, register, spark_schema
    from pgwire_mock.spark.stream import PgOutputStreamReader, StreamSettings, peek_schema
    from pgwire_mock.spark.types import ColumnType, column_type, to_spark_type

_MODULES = {
    "apply": (
        "ApplyError",
        "ApplyResult",
        "DeltaTarget",
        "ParquetTarget",
        "apply_changes",
        "foreach_batch",
        "parquet_target_path",
        "read_parquet_target",
        "state_schema",
    ),
    "decode": (
        "KEY_METADATA",
        "METADATA_FIELDS",
        "SNAPSHOT_OP",
        "ChangeDecoder",
        "DecodeOptions",
        "SchemaChangeError",
        "SparkSideError",
        "StreamStateError",
        "decode_stream",
        "table_schema",
    ),
    "source": ("PgOutputDataSource", "register", "spark_schema"),
    "stream": ("PgOutputStreamReader", "StreamSettings", "peek_schema"),
    "types": ("ColumnType", "column_type", "to_spark_type"),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next lookup is a plain one
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


__all__ = [
    "KEY_METADATA",
    "METADATA_FIELDS",
    "SNAPSHOT_OP",
    "ApplyError",
    "ApplyResult",
    "ChangeDecoder",
    "ColumnType",
    "DecodeOptions",
    "DeltaTarget",
    "ParquetTarget",
    "PgOutputDataSource",
    "PgOutputStreamReader",
    "SchemaChangeError",
    "SparkSideError",
    "StreamSettings",
    "StreamStateError",
    "apply_changes",
    "column_type",
    "decode_stream",
    "foreach_batch",
    "parquet_target_path",
    "peek_schema",
    "read_parquet_target",
    "register",
    "spark_schema",
    "state_schema",
    "table_schema",
    "to_spark_type",
]
