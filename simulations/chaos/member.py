"""One consumer-group member of a chaos run, in a process of its own so that killing it is a crash.

    python -m simulations.chaos.member --topic T --group G --out FILE --member-lease-ttl-s S
                                       --auto-commit-interval-ms M --network-fault-file F

Joins the cluster named by ``$MAFKA4_ETCD_ENDPOINT``, ``$MAFKA4_RAY_ADDRESS`` and
``$MAFKA4_CLUSTER`` (the chaos driver sets them) and polls as a member of group G, from the
beginning, until SIGTERM, which closes the consumer (commit, release, leave) and exits 0.
Between two polls it takes the network fault the driver wrote to F, if it changed
(``simulations.chaos.fault_relay``): a ``partition`` fault that cuts ``client`` off cuts its
fetches too.
SIGKILL (the chaos ``kill-member`` fault) gives it no chance to commit or leave: its VPs move
on only when its lease lapses, and their next owner re-reads from the last commit.

Output, one JSON object per line, flushed after every poll (a crash loses only what poll()
had not returned yet, which the next owner reads again anyway)::

    {"t": T, "ready": MEMBER_ID}                                   joined the group
    {"t": T, "vp": V, "offset": O, "key": HEX, "value": HEX}       a message poll() returned
    {"t": T, "error": TEXT}                                        a join or poll that raised
    {"t": T, "closed": MEMBER_ID}                                  left the group after SIGTERM

Exit status: 0 after SIGTERM (closed, or stopped before it could join); 1 when it could not
join within ``JOIN_ATTEMPTS_MAX`` attempts. Any exit but 0 (that one, an exception, a signal)
of a member the nemesis did not kill fails the run's verdict (``simulations.chaos.verdict``).

``t`` is ``time.monotonic()``: one clock for every process on a Linux machine, so the driver
orders these lines among its own history records.
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
from mafka4.errors import MafkaError
from mafka4.runtime.connect import connect
from simulations.chaos.fault_relay import FaultFile

POLL_TIMEOUT_MS = 200
# A member that cannot join (etcd restarting, a VP leader failing over) tries again this often.
JOIN_RETRY_S = 1.0
JOIN_ATTEMPTS_MAX = 120


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
                            auto_commit_interval_ms=args.auto_commit_interval_ms)
        except (MafkaError, ray.exceptions.RayError) as error:
            _line(out, error=f"join: {type(error).__name__}: {error}")
            out.flush()
            stopping.wait(JOIN_RETRY_S)
    return None


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
            for message in messages:
                _line(out, vp=message.partition, offset=message.offset, lane=message.lane,
                      key=None if message.key is None else message.key.hex(), value=message.value.hex())
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
    return run(parser.parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
