"""What a hosted mafka4-mode member's split wakes (``frontend.hosted_members.VirtualMemberHost``): a split
done wakes nobody by itself (its epoch's watch event wakes whom it asks something of, ``vp_wakes``);
a refused one wakes its member once the retry interval allows asking again.

No etcd and no controller: the intent's answer is a stand-in, and the retry's timer is recorded.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from mafka4.errors import ReshardConflict
from mafka4.frontend import hosted_members
from mafka4.frontend.hosted_members import VirtualMemberHost
from mafka4.limits import VP_GROUP_SPLIT_RETRY_INTERVAL_S


class RecordedTimer:
    started: list["RecordedTimer"] = []

    def __init__(self, interval: float, function):
        self.interval, self.function, self.daemon = interval, function, False

    def start(self) -> None:
        RecordedTimer.started.append(self)


@pytest.fixture
def host(monkeypatch) -> VirtualMemberHost:
    monkeypatch.setattr(hosted_members, "MetadataStore", lambda endpoint: SimpleNamespace(close=lambda: None))
    monkeypatch.setattr(hosted_members.threading, "Timer", RecordedTimer)
    RecordedTimer.started = []
    subject = VirtualMemberHost.__new__(VirtualMemberHost)  # only what a split reads
    subject.member_id, subject._group, subject._topic = "m0", "g", "orders"
    subject._store = SimpleNamespace(endpoint="etcd", cluster="c")
    subject.changed = threading.Event()
    subject._splitter, subject._split_failed_at = None, 0.0
    return subject


def test_a_split_done_wakes_nobody_by_itself(host, monkeypatch):
    monkeypatch.setattr(hosted_members.intents, "request", lambda *args: {})
    host._split(1)
    assert not host.changed.is_set() and not RecordedTimer.started


def test_a_refused_split_wakes_its_member_after_the_retry_interval(host, monkeypatch):
    def refuse(*args):
        raise ReshardConflict("v1 is not active")

    monkeypatch.setattr(hosted_members.intents, "request", refuse)
    host._split(1)
    assert not host.changed.is_set(), "a sync now would not ask again"
    [timer] = RecordedTimer.started
    assert timer.interval == VP_GROUP_SPLIT_RETRY_INTERVAL_S and timer.daemon
    timer.function()
    assert host.changed.is_set()
