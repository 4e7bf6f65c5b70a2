"""Spark-side fixtures: one local[2] SparkSession per test module."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

import pgwire_mock.spark


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    """A local[2] session (the machine's two cores are shared), stopped after the module."""
    # Executors must run this interpreter, the one with the project installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("pgwire-mock-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    pgwire_mock.spark.register(session)
    yield session
    session.stop()


# Real-server Spark tests whose time goes to Spark jobs, not to the server (about 90 s a
# major for the snapshot test): the Spark side does not branch on the major, so they run
# on the oldest and the newest major of the run only, which cover pgoutput protocol
# versions 2 and 4 and 18's generated columns. Deselected, not skipped: by design.
_SPARK_HEAVY: frozenset[str] = frozenset(
    {"test_snapshot_postgres.py", "test_apply_full_identity.py"}
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    majors = sorted(
        {
            item.callspec.params["pg_server"]
            for item in items
            if hasattr(item, "callspec") and "pg_server" in item.callspec.params
        }
    )
    if len(majors) <= 2:
        return
    kept_majors = {majors[0], majors[-1]}
    kept, dropped = [], []
    for item in items:
        params = getattr(item, "callspec", None)
        major = params.params.get("pg_server") if params is not None else None
        if item.path.name in _SPARK_HEAVY and major is not None and major not in kept_majors:
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
