"""A child process a mafka4 process keeps running: started, started again if it exits, stopped by PID.

The local daemon keeps its controller so (``runtime.daemon``), and the active controller its delay
scheduler (``runtime.controller_process``). The child writes its output to a log file (appended),
runs in a working directory of the parent's choice, and is stopped by its own PID: SIGTERM, then
SIGKILL after ``CONTROLLER_STOP_TIMEOUT_S``.
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

from mafka4.limits import CONTROLLER_STOP_TIMEOUT_S

log = logging.getLogger("mafka4.runtime")


class ChildProcess:
    def __init__(self, name: str, command: list[str], log_path: Path, cwd: Path):
        self.name, self.command, self.log_path, self.cwd = name, command, log_path, cwd
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(self.command, stdout=log_file, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd=self.cwd)
        log.info("%s started, pid %d, log %s", self.name, self.process.pid, self.log_path)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def keep_running(self) -> None:
        """Start it if it never ran or exited since (logged)."""
        if self.process is not None and self.process.poll() is not None:
            log.warning("%s exited with code %s; starting it again", self.name, self.process.returncode)
        if not self.running:
            self.start()

    def stop(self) -> None:
        if not self.running:
            return
        assert self.process is not None
        self.process.terminate()
        try:
            self.process.wait(timeout=CONTROLLER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
