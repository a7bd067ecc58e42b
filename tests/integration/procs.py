"""Real service processes for integration tests.

Each service runs as ``python -m boltmq.cli serve <service> --port 0`` and
announces ``READY <service> <host:port>`` on stdout once it is SERVING; the
test reads the address from that line. Stderr goes to a log file under the
test's tmp directory so a failure can show what the service said.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0


class ServiceProcess:
    """One running service; ``address`` is ``host:port``."""

    def __init__(self, service: str, log_dir: Path, *settings: str) -> None:
        self.service = service
        self.settings = settings
        self.log_path = log_dir / f"{service}-{time.monotonic_ns()}.log"
        self.address = ""
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> ServiceProcess:
        args = [sys.executable, "-m", "boltmq.cli", "serve", self.service, "--port", "0"]
        for setting in self.settings:
            args += ["--set", setting]
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("w")
        self.proc = subprocess.Popen(args, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                                     stderr=log, text=True)
        log.close()
        self.address = self._read_ready()
        return self

    def _read_ready(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                line = self.proc.stdout.readline()
                if line.startswith("READY "):
                    return line.split()[2]
                if not line and self.proc.poll() is not None:
                    break
            elif self.proc.poll() is not None:
                break
        self.kill()
        raise RuntimeError(f"{self.service} did not become ready:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])

    def stop(self) -> int | None:
        """SIGTERM and wait (the graceful path); returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        """SIGKILL (a crash)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)
