"""Child service processes: what ``boltmq dev`` and the integration tests start.

A service runs as ``python -m boltmq.cli serve <service> --port P --set ...``
and announces ``READY <service> <host:port>`` on stdout once it is SERVING
(see :mod:`boltmq.kernel.runtime`); the launcher reads the address from that line,
so port 0 works. Stderr goes to a log file, whose last lines explain a
service that failed to start.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
"""The checkout this module runs from (boltmq/cli/dev/ is three levels down)."""
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0


class LaunchError(RuntimeError):
    """A service exited or stayed silent instead of announcing READY."""


class ServiceProcess:
    """One service process; ``address`` is ``host:port`` once started."""

    def __init__(
        self,
        service: str,
        log_dir: Path,
        *settings: str,
        port: int = 0,
        host: str | None = None,
        flags: tuple[str, ...] = (),
        prefix: tuple[str, ...] = (),
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        self.service = service
        self.start_timeout_s = start_timeout_s  # until READY (a big store recovers first)
        self.settings = settings
        self.flags = flags  # further `boltmq serve` flags: ("--statefulset-pod", "x-1")
        self.prefix = prefix  # a command the service runs under: ("ip", "netns", "exec", "ns")
        self.requested_port = port
        self.host = host
        self.log_path = log_dir / f"{service}-{time.monotonic_ns()}.log"
        self.address = ""
        self.ports: dict[str, str] = {}
        """Further listeners the READY line names (``READY mqtt H:P tls=H:P ws=H:P``), and
        the services served in the same process, each by the name of its own READY line
        (``READY store H:P`` before ``READY broker H:P`` of ``serve broker --with-store``)."""
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> ServiceProcess:
        if self.proc is not None:
            self.stop(0)  # an earlier run (killed, or stopped): reaped, its pipe closed
        self.ports = {}
        args = [
            *self.prefix,
            sys.executable,
            "-m",
            "boltmq.cli",
            "serve",
            self.service,
            "--port",
            str(self.requested_port),
        ]
        if self.host:
            args += ["--host", self.host]
        for setting in self.settings:
            args += ["--set", setting]
        args += self.flags
        path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
        env = dict(os.environ, PYTHONPATH=path, PYTHONUNBUFFERED="1")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(
                args, env=env, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True
            )
        self.address = self._read_ready()
        return self

    def _read_ready(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                line = self.proc.stdout.readline()
                if line.startswith("READY "):
                    words = line.split()
                    if words[1] != self.service:  # a service served with it (--with-store)
                        self.ports[words[1]] = words[2]
                        continue
                    self.ports.update(dict(w.split("=", 1) for w in words[3:] if "=" in w))
                    return words[2]
                if not line and self.proc.poll() is not None:
                    break
            elif self.proc.poll() is not None:
                break
        self.stop(0)  # kills it if still running, and closes its pipe
        raise LaunchError(f"{self.service} did not start: {self.last_error()}")

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def last_error(self) -> str:
        """The last non-empty line the service wrote to stderr (without click's "Error: ")."""
        lines = [line for line in self.log().splitlines() if line.strip()]
        return lines[-1].removeprefix("Error: ") if lines else "(no output)"

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait (the graceful path); returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)


class ServedAlongside:
    """A service served in another's process (``serve broker --with-store``): its own
    address (the process's READY line of it), the process's life (stopping or killing
    it stops both)."""

    def __init__(self, process: ServiceProcess, service: str) -> None:
        self.process = process
        self.service = service

    @property
    def address(self) -> str:
        return self.process.ports.get(self.service, "")

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])

    def alive(self) -> bool:
        return self.process.alive()

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        return self.process.stop(timeout_s)

    def kill(self) -> None:
        self.process.kill()

    def log(self) -> str:
        return self.process.log()
