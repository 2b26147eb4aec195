"""The strict verdict of ``mafka4 chaos`` (``simulations.chaos.verdict``) and the exit code it gives.

Each reason is planted on its own in the evidence of a clean run, then all at once: the
verdict must fail on each and list every one, not only the first.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from mafka4.cli import main
from mafka4.errors import InvalidConfig
from simulations.chaos.resource_trend import Samples, Window, resource_trends
from simulations.chaos.verdict import Evidence, Failure, MemberExit, verdict
from simulations.checkers import Kind

NO_ANOMALY = {kind.value: 0 for kind in Kind}
CLEAN = Evidence(
    anomalies=NO_ANOMALY, healed=True, heal_timeout_s=120,
    members=(MemberExit("member-0", killed=False, exit_code=0),
             MemberExit("member-1", killed=True, exit_code=-9),  # the nemesis's kill-member: a fault, not a failure
             MemberExit("member-2", killed=False, exit_code=0)),
)


def failures(evidence: Evidence) -> list[Failure]:
    return [reason.failure for reason in verdict(evidence).reasons]


def test_a_clean_run_passes():
    judged = verdict(CLEAN)
    assert judged.passed and judged.to_json() == {"passed": True, "reasons": []}


def test_a_run_with_a_planted_heal_failure_fails_naming_what_stayed_broken():
    planted = dataclasses.replace(CLEAN, healed=False, unhealthy=("p0: ISR ['w0'] of ['w0', 'w1', 'w2']",))
    judged = verdict(planted)
    assert not judged.passed
    assert judged.to_json()["reasons"] == [
        {"reason": "not-healed", "detail": "not healed within 120 s: p0: ISR ['w0'] of ['w0', 'w1', 'w2']"}]


@pytest.mark.parametrize("kind", [kind for kind in Kind if kind is not Kind.COMMIT_REGRESSED])
def test_any_anomaly_fails(kind):
    judged = verdict(dataclasses.replace(CLEAN, anomalies={**NO_ANOMALY, kind.value: 2}))
    assert [(r.failure, r.detail) for r in judged.reasons] == [(Failure.ANOMALY, f"{kind.value} 2")]


def test_a_commit_regression_fails_as_its_own_reason():
    judged = verdict(dataclasses.replace(CLEAN, anomalies={**NO_ANOMALY, Kind.COMMIT_REGRESSED.value: 1}))
    assert [(r.failure, r.detail) for r in judged.reasons] == [
        (Failure.COMMIT_REGRESSED, "1 committed offsets moved backwards")]


@pytest.mark.parametrize("member, detail", [
    (MemberExit("member-3", killed=False, exit_code=1), "member-3 exited with 1"),
    (MemberExit("member-3", killed=False, exit_code=-11), "member-3 was ended by signal 11"),
    (MemberExit("member-3", killed=False, exit_code=None), "member-3 is still running"),
    # Hung on SIGTERM and killed by the driver: the exit code is the driver's SIGKILL, the fault is the member's.
    (MemberExit("member-3", killed=False, exit_code=-9, stop_timed_out=True),
     "member-3 did not stop when asked and was killed"),
])
def test_an_abnormal_member_exit_fails(member, detail):
    judged = verdict(dataclasses.replace(CLEAN, members=CLEAN.members + (member,)))
    assert [(r.failure, r.detail) for r in judged.reasons] == [(Failure.MEMBER_EXITED_ABNORMALLY, detail)]


def test_an_unreadable_replica_log_fails():
    judged = verdict(dataclasses.replace(CLEAN, unreadable=("p1/w2: GetTimeoutError", "v3/r1: ActorDiedError")))
    assert [(r.failure, r.detail) for r in judged.reasons] == [
        (Failure.LOG_UNREADABLE, "p1/w2: GetTimeoutError, v3/r1: ActorDiedError")]


def test_every_reason_is_listed_not_only_the_first():
    everything = Evidence(
        anomalies={**NO_ANOMALY, "lost": 3, "reordered": 1, "commit-regressed": 2}, healed=False, heal_timeout_s=60,
        unhealthy=("read node r1 not running",),
        members=(MemberExit("member-0", killed=False, exit_code=1), MemberExit("member-1", killed=False, exit_code=-6)),
        unreadable=("v0/r1: ActorDiedError",),
    )
    assert verdict(everything).to_json() == {"passed": False, "reasons": [
        {"reason": "anomaly", "detail": "lost 3, reordered 1"},
        {"reason": "commit-regressed", "detail": "2 committed offsets moved backwards"},
        {"reason": "not-healed", "detail": "not healed within 60 s: read node r1 not running"},
        {"reason": "member-exited-abnormally", "detail": "member-0 exited with 1; member-1 was ended by signal 6"},
        {"reason": "log-unreadable", "detail": "v0/r1: ActorDiedError"},
    ]}


# --- the command's exit code ------------------------------------------------------------------


def planted_run(evidence: Evidence):
    """A stand-in for ``run_chaos`` whose report carries ``evidence``'s verdict."""

    def run_chaos(settings):
        return {"seed": settings.seed, "verdict": verdict(evidence).to_json()}

    return run_chaos


@pytest.fixture
def chaos_command(monkeypatch, tmp_path):
    """Runs ``mafka4 chaos`` with a planted run in place of a cluster; returns (exit code, report)."""
    import simulations.chaos.run as run

    out = tmp_path / "chaos.json"
    monkeypatch.setattr(run, "summary", lambda report: "summary")

    def command(evidence: Evidence) -> tuple[int, dict]:
        monkeypatch.setattr(run, "run_chaos", planted_run(evidence))
        code = main(["chaos", "--seed", "5", "--out", str(out)])
        return code, json.loads(out.read_text())

    return command


def test_the_command_exits_0_on_a_pass_and_1_with_the_reasons_in_the_report_on_a_planted_heal_failure(chaos_command):
    assert chaos_command(CLEAN) == (0, {"seed": 5, "verdict": {"passed": True, "reasons": []}})
    code, report = chaos_command(dataclasses.replace(CLEAN, healed=False))
    assert code == 1 and [reason["reason"] for reason in report["verdict"]["reasons"]] == ["not-healed"]


def test_a_run_stopped_by_an_error_leaves_no_older_report_behind(monkeypatch, tmp_path):
    import simulations.chaos.run as run

    out = tmp_path / "chaos.json"
    out.write_text('{"verdict": {"passed": true, "reasons": []}}')

    def broken_run(settings):
        raise RuntimeError("the cluster did not start")

    monkeypatch.setattr(run, "run_chaos", broken_run)
    with pytest.raises(RuntimeError, match="did not start"):
        main(["chaos", "--out", str(out)])
    assert not out.exists()


def test_a_bad_setting_is_a_usage_error():
    assert main(["chaos", "--members", "9"]) == 2


# --- planted bugs (mafka4.planted_bugs) ---------------------------------------------------------


def test_an_unknown_planted_bug_is_a_usage_error():
    from simulations.chaos.settings import ChaosSettings

    with pytest.raises(InvalidConfig, match="planted_bug='hw' names no planted bug: use one of high-watermark, "
                                            "ack-before-isr, feeder-skips-batch"):
        ChaosSettings(planted_bug="hw")
    with pytest.raises(SystemExit) as exited:
        main(["chaos", "--planted-bug", "hw"])
    assert exited.value.code == 2


def test_the_planted_bug_reaches_the_run_settings(monkeypatch, tmp_path):
    import simulations.chaos.run as run

    asked = []

    def run_chaos(settings):
        asked.append(settings)
        return {"seed": settings.seed, "verdict": verdict(dataclasses.replace(CLEAN, anomalies={"lost": 3})).to_json()}

    monkeypatch.setattr(run, "run_chaos", run_chaos)
    monkeypatch.setattr(run, "summary", lambda report: "summary")
    code = main(["chaos", "--seed", "5", "--planted-bug", "ack-before-isr", "--out", str(tmp_path / "chaos.json")])
    assert code == 1 and [settings.planted_bug for settings in asked] == ["ack-before-isr"]


def report_of(evidence: Evidence, planted_bug: str | None) -> dict:
    """The parts of a run's report that ``summary`` reads."""
    return {"seed": 5, "duration_s": 100.0, "phases_s": {"faults_s": 60.0}, "faults_injected": 0, "faults_by_kind": {},
            "messages": {"sent": 10, "acknowledged": 10, "failed": 0, "consumed_records": 7, "consumed_unique": 7,
                         "redelivered": 0, "unread_acknowledged": 3},
            "heal": {"healed": evidence.healed, "took_s": 1.0}, "drained": False, "anomalies": dict(evidence.anomalies),
            "settings": {"planted_bug": planted_bug}, "verdict": verdict(evidence).to_json(),
            "resources": {"sample_s": 10.0, **resource_trends(Samples((), (), 0), Window(0.0, 60.0)).to_json()}}


def test_the_summary_says_whether_a_planted_bug_was_caught_by_an_anomaly():
    from simulations.chaos.run import summary

    lost = dataclasses.replace(CLEAN, anomalies={**NO_ANOMALY, "lost": 3})
    assert summary(report_of(lost, "feeder-skips-batch")).endswith("planted bug feeder-skips-batch: caught")
    # A run that failed only for not healing shows damage, not that the checkers see the bug.
    not_healed = dataclasses.replace(CLEAN, healed=False)
    assert summary(report_of(not_healed, "high-watermark")).endswith("planted bug high-watermark: NOT caught")
    assert summary(report_of(CLEAN, "ack-before-isr")).endswith("planted bug ack-before-isr: NOT caught")
    assert "planted bug" not in summary(report_of(lost, None))


def test_a_planted_bug_needs_the_throwaway_cluster():
    from simulations.chaos.run import run_chaos
    from simulations.chaos.settings import ChaosSettings

    with pytest.raises(InvalidConfig, match="a cluster passed in runs without it"):
        run_chaos(ChaosSettings(planted_bug="high-watermark"), connection=object())
