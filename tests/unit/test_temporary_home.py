"""``runtime.temporary`` without a cluster: the throwaway home, and starts that fail or must not happen.

A cluster that really starts and stops is tested in tests/integration/test_temporary_cluster.py.
"""

from __future__ import annotations

import os
import re
import sys
import types
from pathlib import Path

import pytest

from mafka4.errors import ClusterNotRunning
from mafka4.runtime import temporary
from mafka4.runtime.daemon import LOG_FILE_NAME
from mafka4.runtime.environment import HOME_ENV, RAY_TEMP_DIR_CHARS_MAX, ray_temp_dir
from mafka4.runtime.temporary import temporary_cluster, temporary_home


class BodyFailed(Exception):
    pass


def test_a_temporary_home_is_short_enough_for_ray_and_is_removed_when_its_body_raises():
    with pytest.raises(BodyFailed):
        with temporary_home("m4unit-") as home:
            assert home.parent == Path("/tmp") and home.name.startswith("m4unit-") and not any(home.iterdir())
            ray_dir = ray_temp_dir(home)
            assert ray_dir.parent == home and len(str(ray_dir)) <= RAY_TEMP_DIR_CHARS_MAX
            (ray_dir / "session_x").mkdir(parents=True)
            (home / "cluster.json").write_text("{}")
            raise BodyFailed()
    assert not home.exists()


def test_a_cluster_that_does_not_start_leaves_no_home_and_its_error_keeps_the_daemon_log(monkeypatch):
    # Run inside the whole suite, this process may already be a driver of the integration tests' Ray.
    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(is_initialized=lambda: False, shutdown=lambda: None))
    monkeypatch.setenv(HOME_ENV, "/somewhere/else")
    homes = []

    def failing_up(home, config):
        homes.append(home)
        assert os.environ[HOME_ENV] == str(home)  # what the cluster's processes inherit
        (home / LOG_FILE_NAME).write_text("starting\nray head failed: port taken\n")
        raise ClusterNotRunning(f"the cluster daemon exited with code 1; see {home / LOG_FILE_NAME}")

    monkeypatch.setattr(temporary, "up", failing_up)
    log_tail = "the daemon log ends: starting | ray head failed: port taken"
    with pytest.raises(ClusterNotRunning, match=re.escape(log_tail)):
        with temporary_cluster():
            pytest.fail("the body must not run without a cluster")
    assert homes and not homes[0].exists()
    assert os.environ[HOME_ENV] == "/somewhere/else"


def test_a_process_already_connected_to_ray_starts_no_cluster(monkeypatch):
    joined = types.SimpleNamespace(is_initialized=lambda: True,
                                   get_runtime_context=lambda: types.SimpleNamespace(gcs_address="127.0.0.1:6379"))
    monkeypatch.setitem(sys.modules, "ray", joined)
    monkeypatch.setattr(temporary, "up", lambda home, config: pytest.fail("no cluster may start"))
    with pytest.raises(ClusterNotRunning, match="already connected to Ray at 127.0.0.1:6379"):
        with temporary_cluster():
            pass
