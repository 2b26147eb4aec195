"""One consumer-group member of a chaos run, in a process of its own so that killing it is a crash.

    python -m simulations.chaos.member --topic T --group G --out FILE --member-lease-ttl-s S
                                       --auto-commit-interval-ms M --network-fault-file F
                                       [--retry-policy JSON --nack-share N --poison-share P]

Joins the cluster named by ``$MAFKA4_ETCD_ENDPOINT``, ``$MAFKA4_RAY_ADDRESS`` and
``$MAFKA4_CLUSTER`` (the chaos driver sets them) and polls as a member of group G, from the
beginning, until SIGTERM, which closes the consumer (commit, release, leave) and exits 0.
Between two polls it takes the network fault the driver wrote to F, if it changed
(``simulations.chaos.fault_relay``): a ``partition`` fault that cuts ``client`` off cuts its
fetches too.
SIGKILL (the chaos ``kill-member`` fault) gives it no chance to commit or leave: its VPs move
on only when its lease lapses, and their next owner re-reads from the last commit.

With ``--retry-policy`` (the group's ``RetryPolicy`` as JSON) it reads the group's retry topic
beside the topic, and nacks the values ``simulations.chaos.traffic.fails`` names: about
``--nack-share`` of them on their first delivery, ``--poison-share`` on every one (they end in the
group's dead-letter topic). Before each nack it takes the epoch ms and writes it with the due
time of the redelivery that nack schedules (that time plus the policy's back-off for the
delivery; none when the nack dead-letters it): a lower bound of the due time the consumer writes,
which takes its clock a moment later. The nack is written before the call; one that raises is
then taken back by a ``nack_failed`` line (also an error).

Output, one JSON object per line, flushed after every poll (a crash loses only what poll()
had not returned yet, which the next owner reads again anyway)::

    {"t": T, "ready": MEMBER_ID}                                   joined the group
    {"t": T, "vp": V, "offset": O, "lane": L, "key": HEX, "value": HEX, "delivery": N, "at_ms": MS}
                                                                   a message of the topic poll() returned
    {"t": T, "retry": P, ...the same}                              one of the group's retry topic
    {"t": T, "nack": HEX, "delivery": N, "at_ms": MS, "due_ms": MS|null}   a nack of that delivery
    {"t": T, "nack_failed": HEX, "delivery": N, "error": TEXT}     that nack raised: taken back
    {"t": T, "error": TEXT}                                        a join or poll that raised
    {"t": T, "closed": MEMBER_ID}                                  left the group after SIGTERM

Exit status: 0 after SIGTERM (closed, or stopped before it could join); 1 when it could not
join within ``JOIN_ATTEMPTS_MAX`` attempts. Any exit but 0 (that one, an exception, a signal)
of a member the nemesis did not kill fails the run's verdict (``simulations.chaos.verdict``).

``t`` is ``time.monotonic()``: one clock for every process on a Linux machine, so the driver
orders these lines among its own history records. ``at_ms`` is the epoch ms (``time.time_ns()``)
taken when poll() returned, the clock of the due times, for the checks of earliness.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from pathlib import Path

import ray

from mafka4.client.consumer import Consumer
from mafka4.client.message import Message
from mafka4.client.retry_policy import RetryPolicy
from mafka4.errors import MafkaError
from mafka4.runtime.connect import connect
from simulations.chaos.fault_relay import FaultFile
from simulations.chaos.traffic import fails

POLL_TIMEOUT_MS = 200
# A member that cannot join (etcd restarting, a VP leader failing over) tries again this often.
JOIN_RETRY_S = 1.0
JOIN_ATTEMPTS_MAX = 120


def now_ms() -> int:
    """Epoch ms, the clock of the due times (``workload.now_ms``)."""
    return time.time_ns() // 1_000_000


def _line(out, **fields) -> None:
    out.write(json.dumps({"t": time.monotonic(), **fields}) + "\n")


def _join(args: argparse.Namespace, connection, out, stopping: threading.Event, faults: FaultFile) -> Consumer | None:
    for _ in range(JOIN_ATTEMPTS_MAX):
        if stopping.is_set():
            return None
        faults.follow()
        try:
            return Consumer(args.topic, group=args.group, connection=connection, from_beginning=True,
                            member_lease_ttl_s=args.member_lease_ttl_s,
                            auto_commit_interval_ms=args.auto_commit_interval_ms, retry_policy=args.retry_policy)
        except (MafkaError, ray.exceptions.RayError) as error:
            _line(out, error=f"join: {type(error).__name__}: {error}")
            out.flush()
            stopping.wait(JOIN_RETRY_S)
    return None


def _nack(consumer: Consumer, message: Message, policy: RetryPolicy, out) -> None:
    """Write the nack of ``message``, then nack it (the module docstring).

    Written and flushed first: the copy a nack sends may be written before the member dies, and a
    retry read with its nack missing from the history could seem due at a later member's nack of
    the same delivery. A nack that raises is taken back (``nack_failed``)."""
    count = message.delivery_count
    at_ms = now_ms()
    due_ms = None if policy.exhausted(count) else at_ms + policy.delay_ms_after(count)
    _line(out, nack=message.value.hex(), delivery=count, at_ms=at_ms, due_ms=due_ms)
    out.flush()
    try:
        consumer.nack(message, error=f"chaos: failed delivery {count}")
    except (MafkaError, ray.exceptions.RayError) as error:
        _line(out, nack_failed=message.value.hex(), delivery=count, error=f"nack: {type(error).__name__}: {error}")


def run(args: argparse.Namespace) -> int:
    stopping = threading.Event()
    connection = connect()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())  # after connect: joining Ray installs its own handler
    faults = FaultFile(args.network_fault_file)
    with open(args.out, "a", encoding="utf-8") as out:
        consumer = _join(args, connection, out, stopping, faults)
        if consumer is None:
            # Asked to stop before it joined: nothing to close. Out of join attempts: a failure.
            return 0 if stopping.is_set() else 1
        _line(out, ready=consumer.member_id)
        out.flush()
        while not stopping.is_set():
            faults.follow()
            try:
                messages = consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
            except (MafkaError, ray.exceptions.RayError) as error:
                # A real application logs and polls on; the driver counts these.
                _line(out, error=f"poll: {type(error).__name__}: {error}")
                out.flush()
                stopping.wait(POLL_TIMEOUT_MS / 1000)
                continue
            read_ms = now_ms()
            for message in messages:
                where = {"vp": message.partition} if message.topic == args.topic else {"retry": message.partition}
                _line(out, **where, offset=message.offset, lane=message.lane,
                      key=None if message.key is None else message.key.hex(), value=message.value.hex(),
                      delivery=message.delivery_count, at_ms=read_ms)
                if args.retry_policy is not None and fails(message.value, message.delivery_count, args.nack_share,
                                                           args.poison_share):
                    _nack(consumer, message, args.retry_policy, out)
            out.flush()
        consumer.close()
        _line(out, closed=consumer.member_id)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--out", required=True, help="JSON-lines file this member appends to")
    parser.add_argument("--member-lease-ttl-s", type=int, required=True)
    parser.add_argument("--auto-commit-interval-ms", type=int, required=True)
    parser.add_argument("--network-fault-file", type=Path, required=True,
                        help="JSON file the driver writes the clients' network fault to")
    parser.add_argument("--retry-policy", type=lambda text: RetryPolicy.from_json(json.loads(text)),
                        help="the group's retry policy as JSON; without it, nothing is nacked")
    parser.add_argument("--nack-share", type=float, default=0.0)
    parser.add_argument("--poison-share", type=float, default=0.0)
    return run(parser.parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
