"""Turning what Ray raises into the mafka4 error that caused it."""

from __future__ import annotations

import ray

from mafka4.errors import MafkaError


def unwrap(error: BaseException) -> BaseException:
    """The original ``MafkaError`` inside a ``RayTaskError``, so users see our message, not a traceback dump."""
    if isinstance(error, ray.exceptions.RayTaskError):
        cause = getattr(error, "cause", None)
        if isinstance(cause, MafkaError):
            return cause
    return error
