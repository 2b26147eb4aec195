"""Fixtures shared by the unit tests.

* ``spark``: one local Spark session for every Spark test of the run (``test_spark_*``,
  ``test_omb_results``): one core, loopback only, no UI, 2 shuffle partitions. A session costs
  seconds to start on this machine, and the tests need nothing of their own from it; each test
  unpersists what it caches. It starts with the first test that asks for it and stops when the
  run ends. A test must not stop it, nor call ``analyze`` without ``spark=`` on data that
  reaches Spark (``analyze`` stops a session it made itself, and ``getOrCreate`` would hand it
  this one).
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from simulations.analysis import spark_session  # pyspark: only when a Spark test runs
    from simulations.analysis_settings import AnalysisSettings

    session = spark_session(AnalysisSettings(master="local[1]", shuffle_partitions=2))
    yield session
    session.stop()
