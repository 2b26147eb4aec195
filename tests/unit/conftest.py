"""Fixtures shared by the unit tests.

* ``spark``: one local Spark session for every Spark test of the run (``test_spark_*``,
  ``test_omb_results``): one core, loopback only, no UI, 2 shuffle partitions. A session costs
  seconds to start on this machine, and the tests need nothing of their own from it; each test
  unpersists what it caches. It starts with the first test that asks for it and stops when the
  run ends. A test must not stop it, nor call ``analyze`` without ``spark=`` on data that
  reaches Spark (``analyze`` stops a session it made itself, and ``getOrCreate`` would hand it
  this one).

  The tests give Spark a few hundred rows, so what costs is fixed work per query, not rows; the
  session is tuned for that (``SMALL_DATA_SQL``, ``SMALL_DATA_JVM``), which halves the CPU time
  of the Spark tests. None of it changes a result: Spark evaluates expressions interpreted
  instead of compiling Java for each query (the path it falls back to when compilation fails),
  keeps its 2 shuffle partitions instead of re-planning (and merging them) after each stage, and
  the JVM compiles hot code with its quick compiler (C1) only. C2 would compile it again into
  faster code, which a run this short does not win back: with C2 the Spark tests used 50 % more
  CPU, and no less wall time on 2 cores with one core's worth of other work running.
* ``started_members``: every member process the test starts through ``bench.member_process.start``
  (the join benches', ``bench consume``'s and the scaling experiment's members all start there),
  for a test to check that none outlives what started it.
"""

from __future__ import annotations

import os

import pytest

from mafka4.exported_variables import exported_variable

SMALL_DATA_SQL = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.adaptive.enabled": "false",
}
SMALL_DATA_JVM = "-XX:TieredStopAtLevel=1"


@pytest.fixture(scope="session")
def spark():
    from simulations.analysis.job import spark_session  # pyspark: only when a Spark test runs
    from simulations.analysis.settings import AnalysisSettings

    # pyspark hands PYSPARK_SUBMIT_ARGS to the spark-submit that starts the driver's JVM.
    submit_args = f"--driver-java-options={SMALL_DATA_JVM} {os.environ.get('PYSPARK_SUBMIT_ARGS', 'pyspark-shell')}"
    with exported_variable("PYSPARK_SUBMIT_ARGS", submit_args):
        session = spark_session(AnalysisSettings(master="local[1]", shuffle_partitions=2))
    for key, value in SMALL_DATA_SQL.items():
        session.conf.set(key, value)
    yield session
    session.stop()


@pytest.fixture
def started_members(monkeypatch) -> list:
    """The ``subprocess.Popen`` of every member process the test starts, in the order started."""
    from mafka4.bench import member_process

    processes = []
    real_start = member_process.start

    def start(*args):
        process, channel = real_start(*args)
        processes.append(process)
        return process, channel

    monkeypatch.setattr(member_process, "start", start)
    return processes
