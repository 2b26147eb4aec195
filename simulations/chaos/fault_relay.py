"""A network fault carried to the chaos run's group members, which run in processes of their own.

A ``partition`` fault that cuts the node ``client`` off must reach every client of the run: the
driver's producer (its process's gate, which ``Admin.set_network_fault`` sets) and the group
members' consumers, each in a process of its own. The driver writes the fault to one JSON file
(``FaultFile.write``); each member looks at the file's inode and change time between two polls
(``FaultFile.follow``) and sets its own process's gate when it changed. A member started while
a fault is in force (one replacing a killed member) takes it at its first look.

The file is replaced by rename, so a member never reads half of one. A member reads it within
one poll (``simulations.chaos.member.POLL_TIMEOUT_MS``) of the driver's write, which is far
shorter than any fault's hold.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mafka4.partition_gate import HEALED, NetworkFault, set_client_fault


class FaultFile:
    """The JSON file a network fault for the members' clients is written to and read from."""

    def __init__(self, path: Path):
        self.path = Path(path)
        # (inode, change time) of the version this process set last. Each write is a new file, so
        # its inode differs from the last one's even when the clock's tick did not move.
        self._seen: tuple[int, int] | None = None

    def write(self, fault: NetworkFault) -> None:
        """Make ``fault`` (``HEALED`` to heal) the one every member sets next."""
        staged = self.path.with_name(self.path.name + ".new")
        staged.write_text(json.dumps(fault.to_json()), encoding="utf-8")
        os.replace(staged, self.path)

    def read(self) -> NetworkFault:
        """The fault written last; ``HEALED`` if none was ever written."""
        try:
            return NetworkFault.from_json(json.loads(self.path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return HEALED

    def follow(self) -> NetworkFault | None:
        """Set this process's client gate to the fault written last, if it changed since the last
        look; the fault set, or None if nothing changed."""
        try:
            status = self.path.stat()
        except FileNotFoundError:
            return None
        version = (status.st_ino, status.st_mtime_ns)
        if version == self._seen:
            return None
        fault = self.read()
        self._seen = version
        return set_client_fault(fault)
