"""Hooks for the whole session, whatever directories it runs.

At the session's end this process closes the clients it may still hold, before the interpreter
finalizes: the stream caller's event loop thread, Ray's driver and a Spark session. Two full
runs of the suite ended in a segmentation fault during interpreter shutdown after every test
had passed (exit 139, not reproduced since); native client threads still running while the
interpreter tears down are the usual cause of such a crash, and a session that ends its clients
itself leaves fewer of them. Each close only runs if its library was imported: a session of
pure unit tests imports none of them for it.
"""

from __future__ import annotations

import sys


def pytest_sessionfinish(session, exitstatus):
    if "mafka4.client.stream_caller" in sys.modules:
        sys.modules["mafka4.client.stream_caller"].close_stream_caller()
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()
    if "pyspark.sql" in sys.modules:
        active = sys.modules["pyspark.sql"].SparkSession.getActiveSession()
        if active is not None:
            active.stop()
