"""A producer process that writes to a partition that never acknowledges, reporting its RSS.

Run by ``mafka4 bench produce``; prints one JSON line: baseline and peak RSS, the
configured ``buffer_bytes_max``, and how many sends were refused with ``BufferFull``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import psutil

from mafka4.client.producer import Producer
from mafka4.errors import BufferFull

SAMPLE_INTERVAL_S = 0.1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("topic")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--message-bytes", type=int, default=1024)
    parser.add_argument("--buffer-bytes-max", type=int, default=64 * 1024 * 1024)
    args = parser.parse_args()
    process = psutil.Process()
    producer = Producer(args.topic, on_full="error", buffer_bytes_max=args.buffer_bytes_max, delivery_timeout_ms=3_600_000)
    payload = os.urandom(args.message_bytes)
    baseline = peak = process.memory_info().rss
    sent = refused = 0
    acknowledged = []

    def count_ack(metadata, error):
        if error is None:
            acknowledged.append(1)

    deadline = time.monotonic() + args.seconds
    next_sample = 0.0
    while time.monotonic() < deadline:
        try:
            producer.send(payload).add_callback(count_ack)
            sent += 1
        except BufferFull:
            refused += 1
            time.sleep(0.001)
        if time.monotonic() >= next_sample:
            peak = max(peak, process.memory_info().rss)
            next_sample = time.monotonic() + SAMPLE_INTERVAL_S
    peak = max(peak, process.memory_info().rss)
    acknowledged_messages = len(acknowledged)
    producer.close(timeout_s=1)
    print(json.dumps({
        "baseline_rss_mb": round(baseline / 2**20, 1), "peak_rss_mb": round(peak / 2**20, 1),
        "growth_mb": round((peak - baseline) / 2**20, 1), "buffer_bytes_max_mb": round(args.buffer_bytes_max / 2**20, 1),
        "messages_accepted": sent, "sends_refused_buffer_full": refused, "acknowledged": acknowledged_messages,
    }))


if __name__ == "__main__":
    main()
