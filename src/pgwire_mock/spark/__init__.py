"""The Spark side: pgoutput streams as Arrow batches, a Spark data source, and applying
changes to Parquet and Delta Lake tables. Needs the ``spark`` extra.

>>> import pgwire_mock.spark
>>> pgwire_mock.spark.register(spark)                                   # doctest: +SKIP
>>> spark.read.format("pgoutput").option("path", "t.jsonl").option("table", "public.t").load()
>>> spark.readStream.format("pgoutput").option("dsn", dsn).option("slot", "s")  # doctest: +SKIP
"""

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
