"""What the in-process micro benchmarks share around their runs: quiet mafka4 loggers, and the JSON out."""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def quiet_mafka4_logs() -> Iterator[None]:
    """The mafka4 loggers at ERROR for the block (a VP's "leads" line once per VP, in older trees a
    warning), then back at their level: run in a test's process, a benchmark leaves logging as it found it."""
    logs = logging.getLogger("mafka4")
    level = logs.level
    logs.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logs.setLevel(level)


def write_report(out: object, output: str) -> None:
    """``out`` as indented JSON to ``output`` ("-": standard output)."""
    text = json.dumps(out, indent=1)
    if output == "-":
        print(text)
    else:
        Path(output).write_text(text + "\n")
