"""Errors across the client port: an exception to an ``ErrorAnswer`` and back.

A ``MafkaError`` travels by its class name, message and ``retriable`` flag. The receiving side
raises the class of that name only if ``mafka4.errors`` defines it as a ``MafkaError``: a name
is looked up there and nowhere else, so a peer can make a client raise a mafka4 error and never
import or construct anything else. An unknown name becomes a plain ``MafkaError`` whose message
starts with the name and which keeps the flag the server sent. An exception that is not a
``MafkaError`` is a server fault: the client learns its type and message, not its traceback.

Pure: values in, values out.
"""

from __future__ import annotations

from mafka4 import errors
from mafka4.errors import MafkaError
from mafka4.limits import PROTOCOL_STR_BYTES_MAX
from mafka4.protocol.messages import ErrorAnswer


def error_answer(error: BaseException) -> ErrorAnswer:
    """What answers a request that raised ``error`` (its message cut to what a str field may hold)."""
    if isinstance(error, MafkaError):
        name, message, retriable = type(error).__name__, str(error), bool(error.retriable)
    else:
        name, message, retriable = "MafkaError", f"the server failed: {type(error).__name__}: {error}", False
    return ErrorAnswer(name, message[:PROTOCOL_STR_BYTES_MAX // 4], retriable)  # <= 4 UTF-8 bytes a character


def raised_error(answer: ErrorAnswer) -> MafkaError:
    """The error to raise for ``answer``."""
    cls = getattr(errors, answer.error, None) if answer.error.isidentifier() else None
    if isinstance(cls, type) and issubclass(cls, MafkaError) and cls.__module__ == errors.__name__:
        return cls(answer.message)
    error = MafkaError(f"{answer.error}: {answer.message}")
    error.retriable = answer.retriable
    return error
