"""``mafka4.planted_bugs``: the switch, and what each planted bug does to its core.

The simulator's and the checkers' side of the demo is ``tests/sim/test_planted_bugs_caught.py``;
here each bug is pinned on the core it breaks, so that a refactoring that moves a site away from
the shared core (where it would no longer reach both judges) fails here first.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mafka4 import planted_bugs
from mafka4.errors import InvalidConfig
from mafka4.limits import Acks
from mafka4.planted_bugs import PLANTED_BUG_ENV, PlantedBug
from mafka4.virtual.feed_plan import plan_round
from test_replica import fetch, leader, produce
from test_virtual_feeding import LAYOUT, batches

ROOT = Path(__file__).resolve().parents[2]


# --- the switch ---------------------------------------------------------------------------


def test_no_name_plants_nothing_and_each_name_plants_its_bug():
    assert planted_bugs.parse(None) is None and planted_bugs.parse("") is None and planted_bugs.parse("  ") is None
    assert planted_bugs.parse("high-watermark") is PlantedBug.HIGH_WATERMARK
    assert planted_bugs.parse("ack-before-isr") is PlantedBug.ACK_BEFORE_ISR
    assert planted_bugs.parse(" Feeder-Skips-Batch ") is PlantedBug.FEEDER_SKIPS_BATCH


def test_an_unknown_name_is_refused_naming_every_choice():
    with pytest.raises(InvalidConfig, match="MAFKA4_PLANTED_BUG='hw' names no planted bug: use one of "
                                            "high-watermark, ack-before-isr, feeder-skips-batch"):
        planted_bugs.parse("hw")


def _imported_in_a_new_process(value: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != PLANTED_BUG_ENV}
    if value is not None:
        env[PLANTED_BUG_ENV] = value
    return subprocess.run([sys.executable, "-c", "from mafka4 import planted_bugs; print(planted_bugs.PLANTED)"],
                          cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)


def test_the_environment_is_read_once_at_import_and_a_bad_name_stops_the_import():
    assert _imported_in_a_new_process(None).stdout.strip() == "None"
    assert _imported_in_a_new_process("ack-before-isr").stdout.strip() == "PlantedBug.ACK_BEFORE_ISR"
    bad = _imported_in_a_new_process("skip-everything")
    assert bad.returncode != 0 and "InvalidConfig" in bad.stderr and "feeder-skips-batch" in bad.stderr


def test_tests_run_without_a_planted_bug():
    assert planted_bugs.PLANTED is None, f"${PLANTED_BUG_ENV} is set: every test of a promise would fail"


def test_planted_holds_for_this_process_only_and_exported_for_the_processes_it_starts():
    with planted_bugs.planted(PlantedBug.HIGH_WATERMARK):
        assert planted_bugs.PLANTED is PlantedBug.HIGH_WATERMARK and PLANTED_BUG_ENV not in os.environ
    assert planted_bugs.PLANTED is None
    before = os.environ.get(PLANTED_BUG_ENV)
    with planted_bugs.exported(PlantedBug.FEEDER_SKIPS_BATCH):
        assert os.environ[PLANTED_BUG_ENV] == "feeder-skips-batch" and planted_bugs.PLANTED is None
    assert os.environ.get(PLANTED_BUG_ENV) == before


# --- each bug on its core -------------------------------------------------------------------


@pytest.fixture
def plant():
    """Plant a bug in this process until the test ends."""
    with contextlib.ExitStack() as stack:
        yield lambda bug: stack.enter_context(planted_bugs.planted(bug))


def test_high_watermark_bug_commits_what_no_follower_holds(plant):
    plant(PlantedBug.HIGH_WATERMARK)
    state = leader()
    fetch(state, "r1", 0)
    fetch(state, "r2", 0)
    plan = produce(state, count=3)
    assert state.high_watermark == state.log_end_offset == 3  # the real core stays at 0
    assert state.ack_ready(plan.next_offset)


def test_ack_before_isr_bug_answers_acks_all_on_append_and_keeps_the_high_watermark(plant):
    plant(PlantedBug.ACK_BEFORE_ISR)
    state = leader()
    fetch(state, "r1", 0)
    fetch(state, "r2", 0)
    plan = produce(state, count=3, acks=Acks.ALL)
    assert state.ack_ready(plan.next_offset) and state.high_watermark == 0


def test_without_a_planted_bug_acks_all_waits_for_the_isr():
    state = leader()
    fetch(state, "r1", 0)
    fetch(state, "r2", 0)
    plan = produce(state, count=3)
    assert not state.ack_ready(plan.next_offset) and state.high_watermark == 0


def test_feeder_bug_drops_the_batches_holding_a_multiple_of_the_stride_and_feeds_on(plant):
    stride = planted_bugs.SKIPPED_BATCH_OFFSET_STRIDE
    data = batches([stride - 1, 2, stride - 3, 4])  # the second and the fourth batch hold a multiple
    whole = plan_round(data, 0, LAYOUT, next_offset=1, records_max=100)
    plant(PlantedBug.FEEDER_SKIPS_BATCH)
    planned = plan_round(data, 0, LAYOUT, next_offset=1, records_max=100)
    handed = sorted(r.offset for chunks in planned.chunks.values() for chunk in chunks for r in chunk)
    second, fourth = range(stride - 1, stride + 1), range(2 * stride - 2, 2 * stride + 2)
    assert handed == [offset for offset in range(1, 2 * stride + 2) if offset not in second and offset not in fourth]
    assert planned.next_offset == whole.next_offset == 2 * stride + 2  # no error, nothing left to refetch
    # The rule is the batch's own: a refeed from before the skipped batch skips it again.
    again = plan_round(data, 0, LAYOUT, next_offset=stride - 1, records_max=100)
    assert {r.offset for chunks in again.chunks.values() for chunk in chunks for r in chunk} == set(
        range(stride + 1, 2 * stride - 2))
