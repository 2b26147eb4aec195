"""``mafka4 status``'s scrape of every metrics target it lists, for its figures (a shell).

``cluster_figures`` scrapes the targets ``mafka4 status`` shows under ``metrics`` (read nodes,
replicas, the active controller: ``metrics.targets``), at the addresses their liveness keys name,
over HTTP like Prometheus, and sums the answers up (``metrics.figures``).

Bounded, so that status never hangs on a node: at most ``STATUS_SCRAPE_THREADS_MAX`` scrapes at
once (a thread pool); each gets ``STATUS_SCRAPE_TIMEOUT_S`` (a socket timeout, and a deadline
checked between reads) and at most ``STATUS_SCRAPE_BYTES_MAX`` bytes; no scrape starts past
``STATUS_SCRAPES_DEADLINE_S``. A target that fails any of these, refuses the connection or
answers an HTTP error (a node whose loop took no snapshot answers 500: ``metrics.exposition``)
is listed as not answering, with why.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import time
import urllib.request
from typing import Sequence

from mafka4.limits import (STATUS_SCRAPE_BYTES_MAX, STATUS_SCRAPE_THREADS_MAX, STATUS_SCRAPE_TIMEOUT_S,
                           STATUS_SCRAPES_DEADLINE_S)
from mafka4.metrics.figures import TargetAnswer, figures
from mafka4.metrics.targets import MetricsTarget, shown_targets

_READ_SIZE = 1 << 16  # bytes per read of an answer: the deadline and the size bound are checked between reads


def cluster_figures(shown: dict[str, dict[str, str]]) -> dict:
    """``metrics.figures.figures`` of the targets ``shown`` ({process: {name: address}}, as status shows them)."""
    return figures(scrape_all(shown_targets(shown)))


def scrape_all(targets: Sequence[MetricsTarget], timeout_s: float = STATUS_SCRAPE_TIMEOUT_S,
               threads_max: int = STATUS_SCRAPE_THREADS_MAX, deadline_s: float = STATUS_SCRAPES_DEADLINE_S,
               bytes_max: int = STATUS_SCRAPE_BYTES_MAX) -> list[TargetAnswer]:
    """One answer per target, in order (see the module docstring)."""
    if not targets:
        return []
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(threads_max, len(targets)),
                                                 thread_name_prefix="mafka4-status-scrape")
    try:
        futures = [pool.submit(scrape, target, timeout_s, bytes_max) for target in targets]
        concurrent.futures.wait(futures, timeout=deadline_s)
    finally:
        # The scrapes not started yet are dropped; those running end within their own timeout.
        pool.shutdown(wait=True, cancel_futures=True)
    return [future.result() if not future.cancelled() else
            TargetAnswer(target, error=f"not scraped: status scrapes for at most {deadline_s} s")
            for target, future in zip(targets, futures)]


def scrape(target: MetricsTarget, timeout_s: float = STATUS_SCRAPE_TIMEOUT_S,
           bytes_max: int = STATUS_SCRAPE_BYTES_MAX) -> TargetAnswer:
    """The exposition ``target`` serves, or why none within ``timeout_s`` and ``bytes_max``."""
    deadline = time.monotonic() + timeout_s
    chunks, size = [], 0
    try:
        with urllib.request.urlopen(f"http://{target.address}/metrics", timeout=timeout_s) as answer:
            while chunk := answer.read(_READ_SIZE):
                size += len(chunk)
                if size > bytes_max:
                    return TargetAnswer(target, error=f"served more than {bytes_max} bytes of metrics")
                if time.monotonic() > deadline:
                    return TargetAnswer(target, error=f"did not answer within {timeout_s} s")
                chunks.append(chunk)
        return TargetAnswer(target, text=b"".join(chunks).decode())
    except TimeoutError:
        return TargetAnswer(target, error=f"did not answer within {timeout_s} s")
    except (OSError, http.client.HTTPException, UnicodeDecodeError) as error:  # URLError and HTTPError are OSErrors
        return TargetAnswer(target, error=f"{type(error).__name__}: {error}")
