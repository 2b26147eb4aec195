"""A 3-member etcd on loopback: the store outlives any one member, the leader included.

Real etcd processes on free 127.0.0.1 ports, started and stopped (or SIGKILLed) by PID. What a
user relies on: every call, lease and watch given the whole member list keeps working when one
member goes away, with at most retriable errors while the store moves on and the others elect
a leader; a wrong endpoint list fails at once, naming what is wrong.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest

from mafka4.errors import CoordinatorUnavailable, InvalidConfig
from mafka4.limits import LEASE_REFRESHES_PER_TTL
from mafka4.limits.servers import ClusterConfig, ControllerConfig
from mafka4.metadata.lease_holder import LeaseHolder, LeaseThread
from mafka4.metadata.store import MetadataStore, WatchEvent
from mafka4.runtime.etcd_member import EtcdServer, etcd_endpoint
from mafka4.runtime.etcd_server import member_data_dirs, restart_etcd, start_etcd_members, stop_etcd, stop_etcd_members
from mafka4.runtime.ports import free_loopback_port
from mafka4.runtime.local import status
from mafka4.runtime.state import ClusterState, load_state, save_state

# Bounds of the waits below, never asserted on: the loops end as soon as their condition holds.
# They cover an election (about a second) and gRPC keepalive on a busy 2-core machine.
RECOVERY_WAIT_S = 30
LEASE_TTL_S = ControllerConfig().lease_ttl_s
REFRESH_INTERVAL_S = 0.2


@pytest.fixture
def members(tmp_path):
    started = start_etcd_members(tmp_path, 3)
    try:
        yield started
    finally:
        stop_etcd_members(started)  # by PID; a member the test killed is only reaped


def with_first(members: tuple[EtcdServer, ...], first: EtcdServer) -> str:
    """The endpoint list of ``members`` starting with ``first``: a store starts on the first listed."""
    return etcd_endpoint([first] + [member for member in members if member is not first])


def leader_of(members: tuple[EtcdServer, ...]) -> EtcdServer:
    store = MetadataStore(etcd_endpoint(members))
    try:
        name = store.leader_name()
    finally:
        store.close()
    return next(member for member in members if member.name == name)


def stop_process(pid: int) -> None:
    """SIGSTOP ``pid`` and wait until every thread of it is stopped: kill() returns once the signal
    is sent, and a thread already running may still answer a call meanwhile (seen in CI)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = []
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/stat") as stat:
                    states.append(stat.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                continue  # a thread that ended
        if states and all(state in ("T", "t") for state in states):
            return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} did not stop within 10 s of SIGSTOP")


def retried(call):
    """``call()`` again after each CoordinatorUnavailable, as every caller of the store does."""
    deadline = time.monotonic() + RECOVERY_WAIT_S
    while True:
        try:
            return call()
        except CoordinatorUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class Watching:
    """A prefix watch set up as the controller sets its watches up: from the revision of a read,
    and again from the last revision seen when it breaks, so that it misses nothing."""

    def __init__(self, store: MetadataStore, prefix: str):
        self.store, self.prefix = store, prefix
        self.events: list[WatchEvent] = []
        self.members_when_broken: list[str] = []
        self.changed = threading.Condition()
        _, self.revision = store.get_prefix_at(prefix)
        self.watch_id = store.watch_prefix(prefix, self._on_events, self._on_broken, self.revision + 1)

    def _on_events(self, events: list[WatchEvent]) -> None:
        with self.changed:
            self.events += events
            self.revision = max([self.revision] + [event.mod_revision for event in events])
            self.changed.notify_all()

    def _on_broken(self) -> None:
        with self.changed:
            self.members_when_broken.append(self.store.member)
            self.changed.notify_all()

    def watch_again(self) -> None:
        self.watch_id = retried(lambda: self.store.watch_prefix(self.prefix, self._on_events, self._on_broken,
                                                                self.revision + 1))

    def wait_for(self, predicate) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: predicate(self), RECOVERY_WAIT_S)

    def keys(self) -> set[str]:
        return {event.key for event in self.events}


@pytest.mark.parametrize("endpoint, named", [
    ("", "is empty"),
    ("127.0.0.1:2379,localhost", "'localhost'"),
    ("127.0.0.1:2379,,127.0.0.1:22379", "a member is empty"),
    ("http://127.0.0.1:2379", "no scheme"),
    ("127.0.0.1:2379,127.0.0.1:70000", "'127.0.0.1:70000'"),
    ("127.0.0.1:2379,127.0.0.1:2379", "127.0.0.1:2379 more than once"),
])
def test_a_bad_endpoint_list_names_the_bad_member_and_the_expected_form(endpoint, named):
    with pytest.raises(InvalidConfig) as raised:
        MetadataStore(endpoint)
    assert named in raised.value.message and "host:port[,host:port...]" in raised.value.message
    assert raised.value.usage_error


def test_a_local_etcd_runs_one_or_three_members():
    assert ClusterConfig().etcd_members == 1 and ClusterConfig(etcd_members=3).etcd_members == 3
    for count in (0, 2, 5):
        with pytest.raises(InvalidConfig, match="must be one of 1, 3"):
            ClusterConfig(etcd_members=count)


def test_every_member_serves_what_was_written_through_the_list(members):
    writer = MetadataStore(etcd_endpoint(members))
    readers = [MetadataStore(with_first(members, member)) for member in members]
    try:
        writer.put("/t/key", {"value": 1})
        assert [reader.member for reader in readers] == [member.endpoint for member in members]
        assert [reader.get("/t/key").value for reader in readers] == [{"value": 1}] * 3
    finally:
        for store in [writer, *readers]:
            store.close()


def test_killing_the_leader_keeps_calls_leases_and_watches_working(members):
    leader = leader_of(members)
    on_leader = MetadataStore(with_first(members, leader))
    follower = next(member for member in members if member is not leader)
    on_follower = MetadataStore(with_first(members, follower))
    # Kept as the controller keeps its lease: refreshed every TTL / 3 from a thread of its own,
    # through a store whose calls fail within one refresh interval.
    lease_store = MetadataStore(with_first(members, leader), timeout_s=LEASE_TTL_S / LEASE_REFRESHES_PER_TTL)
    keeper = LeaseThread(LeaseHolder(lease_store, LEASE_TTL_S, "test lease"), "test-lease")
    try:
        lease_store.put("/t/leased", "kept alive", lease=keeper.holder.grant())
        keeper.start()
        watches = [Watching(on_leader, "/t/"), Watching(on_follower, "/t/")]

        os.kill(leader.pid, signal.SIGKILL)

        retried(lambda: on_leader.put("/t/after", "written"))
        assert on_leader.member != leader.endpoint
        assert retried(lambda: on_follower.get("/t/after")).value == "written"
        # The watch on the dead member broke, and the store had moved on before its owner heard.
        assert watches[0].wait_for(lambda w: w.members_when_broken)
        assert leader.endpoint not in watches[0].members_when_broken
        for watch in watches:
            if watch.members_when_broken:
                watch.watch_again()
            assert watch.wait_for(lambda w: "/t/after" in w.keys()), watch.events

        # Outlive a lease that nobody refreshes: the kept one lives on, and its keeper never lost it.
        unrefreshed = retried(lambda: on_follower.grant_lease(LEASE_TTL_S))
        retried(lambda: on_follower.put("/t/unrefreshed", "expires", lease=unrefreshed))
        deadline = time.monotonic() + RECOVERY_WAIT_S
        while retried(lambda: on_follower.get("/t/unrefreshed")) is not None:
            assert time.monotonic() < deadline, "a lease that is not refreshed did not expire"
            time.sleep(REFRESH_INTERVAL_S)
        assert not keeper.holder.expired()
        assert retried(lambda: on_follower.get("/t/leased")).value == "kept alive"
    finally:
        keeper.close()
        for store in (on_leader, on_follower, lease_store):
            store.close()


def test_a_watch_on_a_member_that_stops_answering_breaks_and_watching_again_uses_another(members):
    # SIGSTOP keeps the member's connections open: only gRPC keepalive tells that it is gone.
    leader = leader_of(members)
    follower = next(member for member in members if member is not leader)
    store = MetadataStore(with_first(members, follower))
    writer = MetadataStore(with_first(members, leader))
    watch = Watching(store, "/t/")
    stop_process(follower.pid)
    try:
        assert watch.wait_for(lambda w: w.members_when_broken), "the watch on a stopped member never broke"
        assert follower.endpoint not in watch.members_when_broken
        watch.watch_again()
        writer.put("/t/after-stop", 1)
        assert watch.wait_for(lambda w: "/t/after-stop" in w.keys())
    finally:
        os.kill(follower.pid, signal.SIGCONT)
        store.close()
        writer.close()


def test_cancelling_a_watch_made_before_the_store_moved_on_cancels_that_watch_only(members):
    # A member that misses a call's deadline but comes back keeps the watches it had: the store
    # moved on, and its next watch lives on another stream whose ids start again at 0.
    leader = leader_of(members)
    follower = next(member for member in members if member is not leader)
    store = MetadataStore(with_first(members, follower), timeout_s=1)
    try:
        old = Watching(store, "/t/")
        stop_process(follower.pid)
        try:
            assert store.get("/t/nothing") is None  # missed its deadline there, made again on the next member
        finally:
            os.kill(follower.pid, signal.SIGCONT)
        assert store.member != follower.endpoint
        new = Watching(store, "/t/")
        store.cancel_watch(old.watch_id)
        store.put("/t/after-cancel", 1)
        assert new.wait_for(lambda w: "/t/after-cancel" in w.keys())
        # And the cancelled one stays silent (seen by the time a later write reached the new one:
        # the old member is as up to date as the others by then, in all but freak timings).
        store.put("/t/marker", 1)
        assert new.wait_for(lambda w: "/t/marker" in w.keys())
        assert "/t/after-cancel" not in old.keys()
    finally:
        store.close()


def test_a_new_store_works_at_once_with_any_one_member_dead(members):
    # What a new process (a CLI command, a consumer) meets: its first call goes to the first
    # member listed, which is dead. Reads are made again on the next member; a write whose member
    # could not be connected to was never sent, so it is made again too.
    members = list(members)
    try:
        for index, dead in enumerate(list(members)):
            os.kill(dead.pid, signal.SIGKILL)
            others = [member for member in members if member is not dead]
            helper = MetadataStore(etcd_endpoint(others))
            retried(lambda: helper.put("/t/written-before", index))  # the others have a leader again
            helper.close()

            store = MetadataStore(with_first(members, dead))
            try:
                assert store.get("/t/written-before").value == index
                assert store.member != dead.endpoint
                store.put("/t/written-by-a-new-process", index)
                assert [item.value for item in store.get_prefix("/t/written-by")] == [index]
            finally:
                store.close()
            second = MetadataStore(with_first(members, dead))
            try:
                second.put("/t/first-call-a-write", index)  # its very first call, to the dead member
                assert second.get("/t/first-call-a-write").value == index
            finally:
                second.close()
            members[index] = restart_etcd(dead)
    finally:
        for member in members:
            stop_etcd(member)  # the fixture stops the members it started, not the restarted ones


def test_a_write_that_may_have_reached_its_member_is_not_made_again(members):
    # A member that stops answering after the connection was made may have applied the write: the
    # store moves on but leaves the retry to its caller, who decides (a compare-and-swap re-reads).
    stopped = members[0]
    store = MetadataStore(with_first(members, stopped), timeout_s=1)
    try:
        store.get("/t/nothing")  # connected to the first member
        stop_process(stopped.pid)
        try:
            with pytest.raises(CoordinatorUnavailable, match=f"etcd member {stopped.endpoint} .1 of 3"):
                store.put("/t/maybe", 1)
        finally:
            os.kill(stopped.pid, signal.SIGCONT)
        assert store.member != stopped.endpoint
    finally:
        store.close()


def test_a_call_that_no_member_answers_names_each_member_tried():
    ports: set[int] = set()
    while len(ports) < 3:
        ports.add(free_loopback_port())
    dead = ",".join(f"127.0.0.1:{port}" for port in sorted(ports))
    store = MetadataStore(dead, timeout_s=2)
    try:
        for call in (lambda: store.get("/t/x"), lambda: store.put("/t/x", 1)):
            with pytest.raises(CoordinatorUnavailable, match="etcd members .* each in turn, did not answer") as raised:
                call()
            assert all(member in str(raised.value) for member in dead.split(","))
    finally:
        store.close()


def test_members_start_again_on_their_data_and_keep_their_metadata(tmp_path):
    first = start_etcd_members(tmp_path, 3)
    try:
        store = MetadataStore(etcd_endpoint(first))
        store.put("/t/kept", 7)
        store.close()
    finally:
        stop_etcd_members(first)
    with pytest.raises(InvalidConfig, match="--etcd-members 3"):
        start_etcd_members(tmp_path, 1)  # would hide the metadata of the 3 members
    again = start_etcd_members(tmp_path, 3)
    try:
        assert [m.peer_port for m in again] == [m.peer_port for m in first]
        store = MetadataStore(etcd_endpoint(again))
        assert store.get("/t/kept").value == 7
        store.close()
    finally:
        stop_etcd_members(again)


def test_the_cluster_record_lists_every_member_and_status_reports_them(members, tmp_path):
    home = tmp_path / "home"
    state = ClusterState(home=str(home), etcd_endpoint=etcd_endpoint(members), etcd_pid=members[0].pid,
                         etcd_members=members, ray_address="127.0.0.1:1", daemon_pid=1, ray_temp_dir=str(home / "ray"))
    save_state(state)
    assert load_state(home) == state

    report = status(home)
    assert [m["pid"] for m in report["etcd_members"]] == [m.pid for m in members]
    assert report["etcd_alive"] and report["etcd_reachable"]
    assert report["etcd_leader"] in {m.name for m in members}

    os.kill(members[0].pid, signal.SIGKILL)  # the member every client of the record tries first
    wait_until_exited(members[0].pid)  # SIGKILL is delivered, not done: a many-threaded etcd takes a moment to die
    report = status_once_reachable(home)
    assert [m["alive"] for m in report["etcd_members"]] == [False, True, True]
    assert not report["etcd_alive"] and report["etcd_reachable"]


def wait_until_exited(pid: int) -> None:
    """Until ``pid`` is a zombie or gone (not reaped: the fixture that started it stops it)."""
    deadline = time.monotonic() + RECOVERY_WAIT_S
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still runs {RECOVERY_WAIT_S} s after SIGKILL")


def status_once_reachable(home) -> dict:
    """``status(home)`` once it reaches etcd (or its last report after RECOVERY_WAIT_S). A member
    killed while it led leaves the other two without a leader until they elect one, and a status
    taken meanwhile rightly reports etcd unreachable: on a loaded machine the election can take
    longer than the status's own timeout."""
    deadline = time.monotonic() + RECOVERY_WAIT_S
    while True:
        report = status(home)
        if report["etcd_reachable"] or time.monotonic() > deadline:
            return report
        time.sleep(0.2)


def test_a_record_of_one_etcd_from_before_members_were_recorded_reads_as_a_lone_member(tmp_path):
    state = ClusterState(home=str(tmp_path), etcd_endpoint="127.0.0.1:2379", etcd_pid=11, ray_address="127.0.0.1:1",
                         daemon_pid=10, ray_temp_dir=str(tmp_path / "ray"))
    (member,) = state.etcd_members
    assert (member.pid, member.endpoint, member.data_dir) == (11, "127.0.0.1:2379", str(member_data_dirs(tmp_path, 1)[0]))
