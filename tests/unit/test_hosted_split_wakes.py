"""What a hosted mafka4-mode member's split wakes (``frontend.hosted_members.VirtualMemberHost``): a split
done wakes nobody by itself (its epoch's watch event wakes whom it asks something of, ``vp_wakes``),
unless a sync named a split while it was asked for (that one was not asked: it is once the member
wakes); a refused one wakes its member once the retry interval allows asking again.

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
    subject._split_lock, subject._splitter, subject._split_failed_at, subject._split_deferred = (
        threading.Lock(), None, 0.0, False)
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


def test_a_split_named_while_another_is_under_way_is_asked_once_that_one_ends(host, monkeypatch):
    # A split's epoch is stored before the controller hosts the children and answers the intent,
    # so the epoch's event wakes the splitter, whose next plan names the next split, while the
    # thread asking for the first still waits for its answer. That sync cannot ask (one split
    # at a time) and its member's wake rule counts the split as asked (``vp_wakes.LastAnswer``):
    # no later event asks for it again. Unless the end of the first split wakes the member, the
    # group stays with fewer VPs than members, some owning nothing (bench read-scale, 'fixed').
    answers = {1: threading.Event(), 2: threading.Event()}
    asked = []

    def request(store, cluster, kind, topic, args, wait_s):
        asked.append(args["vp"])
        assert answers[args["vp"]].wait(60), "the test answers each split"
        return {}

    monkeypatch.setattr(hosted_members.intents, "request", request)
    host._start_split(1)
    first = host._splitter
    host._start_split(2)  # the sync woken by split 1's epoch, while its intent is not answered yet
    assert host._splitter is first and not host.changed.is_set()
    answers[1].set()
    first.join(60)
    assert not first.is_alive() and asked == [1]
    assert host.changed.is_set(), "the split not asked is asked by the sync this wakes"
    host.changed.clear()
    host._start_split(2)  # that sync
    second = host._splitter
    answers[2].set()
    second.join(60)
    assert not second.is_alive() and asked == [1, 2] and not host.changed.is_set()


def test_a_split_that_ends_with_none_named_meanwhile_wakes_nobody(host, monkeypatch):
    answered = threading.Event()
    monkeypatch.setattr(hosted_members.intents, "request", lambda *args: answered.wait(60) and {})
    host._start_split(1)
    splitter = host._splitter
    answered.set()
    splitter.join(60)
    assert not splitter.is_alive() and not host.changed.is_set()


def test_a_refused_split_leaves_the_split_named_meanwhile_to_the_retry_timer(host, monkeypatch):
    refuse = threading.Event()

    def request(*args):
        assert refuse.wait(60)
        raise ReshardConflict("v1 is not active")

    monkeypatch.setattr(hosted_members.intents, "request", request)
    host._start_split(1)
    splitter = host._splitter
    host._start_split(2)
    refuse.set()
    splitter.join(60)
    assert not splitter.is_alive() and not host.changed.is_set(), "a sync now would not ask: too soon"
    [timer] = RecordedTimer.started
    timer.function()
    assert host.changed.is_set()
