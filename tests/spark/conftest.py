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
