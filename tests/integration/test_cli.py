"""The CLI as a user runs it, against the session's local cluster."""

from __future__ import annotations

import secrets
import subprocess
import sys
import time


def mafka4(*args: str, stdin: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mafka4.cli", *args], input=stdin, capture_output=True, timeout=timeout)


def test_create_produce_consume_each_line_exactly_once(cluster):
    topic = f"cli-{secrets.token_hex(3)}"
    created = mafka4("topic", "create", topic, "--partitions", "2", "--replication-factor", "2")
    assert created.returncode == 0, created.stderr
    lines = b"".join(f"{n}\n".encode() for n in range(1, 2001))
    produced = mafka4("produce", topic, stdin=lines)
    assert produced.returncode == 0, produced.stderr
    consumed = mafka4("consume", topic, "--from-beginning", "--max-messages", "2000", "--timeout-ms", "20000")
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(int(line) for line in consumed.stdout.split()) == list(range(1, 2001))
    described = mafka4("topic", "describe", topic)
    assert described.returncode == 0 and b"high_watermark" in described.stdout
    assert topic.encode() in mafka4("topic", "list").stdout


def test_keyed_lines_keep_their_key(cluster):
    topic = f"clikey-{secrets.token_hex(3)}"
    assert mafka4("topic", "create", topic).returncode == 0
    assert mafka4("produce", topic, "--key-sep", ":", stdin=b"a:1\nb:2\n").returncode == 0
    consumed = mafka4("consume", topic, "--from-beginning", "--max-messages", "2", "--print-key", "--key-sep", "=")
    assert sorted(consumed.stdout.split()) == [b"a=1", b"b=2"]
    missing = mafka4("produce", topic, "--key-sep", ":", stdin=b"no separator here\n")
    assert missing.returncode == 2 and b"no key separator" in missing.stderr


def test_errors_are_one_line_with_the_fix(cluster):
    unknown = mafka4("produce", "does-not-exist", stdin=b"x\n")
    assert unknown.returncode == 2
    assert unknown.stderr.strip().startswith(b"mafka4: error: topic 'does-not-exist' does not exist")
    bad = mafka4("topic", "create", "bad/name")
    assert bad.returncode == 2 and b"letters, digits" in bad.stderr
    too_wide = mafka4("topic", "create", f"w-{secrets.token_hex(2)}", "--replication-factor", "9")
    assert too_wide.returncode != 0 and b"replication_factor=9 must be at least 1 and at most 7" in too_wide.stderr


def test_a_mafka4_topic_is_consumed_by_a_group_and_described_with_lag_per_virtual_partition(cluster):
    topic, group = f"clivp-{secrets.token_hex(3)}", f"g-{secrets.token_hex(3)}"
    created = mafka4("topic", "create", topic, "--partitions", "2", "--virtual-partitions", "3")
    assert created.returncode == 0 and b"read mode mafka4, 3 virtual partition(s)" in created.stdout, created.stderr
    lines = b"".join(b"k%d:%d\n" % (n % 7, n) for n in range(300))
    assert mafka4("produce", topic, "--key-sep", ":", stdin=lines).returncode == 0
    consumed = mafka4("consume", topic, "--group", group, "--from-beginning", "--max-messages", "300", "--timeout-ms", "20000")
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(int(v) for v in consumed.stdout.split()) == list(range(300))
    described = mafka4("group", "describe", group)
    assert described.returncode == 0, described.stderr
    rows = [line.split() for line in described.stdout.splitlines() if line.startswith(topic.encode())]
    assert [(row[1], row[2], row[-2], row[-1]) for row in rows] == [
        (b"0", b"active", b"0", b"0.0"), (b"1", b"active", b"0", b"0.0"), (b"2", b"active", b"0", b"0.0")], \
        described.stdout  # lag in messages, then in seconds: none
    again = mafka4("consume", topic, "--group", group, "--timeout-ms", "2000")
    assert again.returncode == 0 and again.stdout == b"", "the group's committed offsets were kept"


def test_delayed_lines_print_their_ids_cancel_and_describe_and_a_group_without_dead_letters_says_so(cluster):
    topic = f"clidelay-{secrets.token_hex(3)}"
    assert mafka4("topic", "create", topic).returncode == 0
    produced = mafka4("produce", topic, "--delay", "600000", stdin=b"later\nmuch later\n")
    assert produced.returncode == 0, produced.stderr
    ids = produced.stdout.split()
    assert len(ids) == 2 and all(b":" in message_id for message_id in ids), produced.stdout
    cancelled = mafka4("topic", "cancel-delayed", topic, ids[0].decode())
    assert cancelled.returncode == 0 and b"cancel of delayed message" in cancelled.stdout, cancelled.stderr
    too_soon = mafka4("produce", topic, "--delay", "10", stdin=b"x\n")
    assert too_soon.returncode == 2 and b"delay_ms=10 is out of range" in too_soon.stderr
    deadline = time.monotonic() + 60
    while True:  # the scheduler writes what waits every second
        described = mafka4("topic", "describe", topic)
        if b"delayed messages waiting: 1 " in described.stdout or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert b"delayed messages waiting: 1 " in described.stdout and b"cancelled: 1" in described.stdout, described.stdout
    no_dlq = mafka4("dlq", "list", "nobody", topic)
    assert no_dlq.returncode == 2 and b"has no dead letters" in no_dlq.stderr
