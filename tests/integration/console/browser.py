"""What the console's browser tests share: the console as a process, and a browser.

:class:`ConsoleProcess` runs ``python -m boltmq.cli console --port 0`` against a
cluster and reads the address it prints. :func:`launch` starts Debian's Chromium
(``/usr/bin/chromium``, ``make chromium``) through Playwright; Playwright's own
browser download is not used. :class:`Visitor` is one logged-in browser context
that records every console error and page error of its pages, and saves a
screenshot of each page it is asked to (``BOLTMQ_CONSOLE_SCREENSHOTS``, else the
test module's temporary directory).
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser, BrowserContext, Page, Playwright

from tests.integration.procs import REPO_ROOT

CHROMIUM = "/usr/bin/chromium"
START_S = 30.0
STEP_MS = 15_000
"""Bound on one browser step (a page load, a selector); steps end as soon as they can."""


class ConsoleProcess:
    """One ``boltmq console`` process for the cluster at ``registry``."""

    def __init__(self, registry: str, *flags: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("BOLTMQ_")}
        env.update(PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "boltmq.cli", "console", "--registry", registry,
             "--port", "0", *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )  # fmt: skip
        lines: queue.Queue[str] = queue.Queue()
        assert self.proc.stdout is not None
        stdout = self.proc.stdout
        threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
        try:
            first = lines.get(timeout=START_S)
        except queue.Empty:
            self.stop()
            raise AssertionError("the console printed no address") from None
        assert first.startswith("console "), (first, self.stop())
        self.url = first.split()[1]

    def stop(self) -> str:
        """Stop it; its stderr."""
        if self.proc.poll() is None:
            self.proc.terminate()
        _, err = self.proc.communicate(timeout=30)
        return err


def launch(playwright: Playwright) -> Browser:
    return playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])


def screenshot_dir(default: Path) -> Path:
    chosen = Path(os.environ.get("BOLTMQ_CONSOLE_SCREENSHOTS", "") or default)
    chosen.mkdir(parents=True, exist_ok=True)
    return chosen


class Visitor:
    """A browser context of one account on the console."""

    def __init__(self, browser: Browser, url: str, shots: Path) -> None:
        self.url = url
        self.shots = shots
        self.context: BrowserContext = browser.new_context(viewport={"width": 1280, "height": 900})
        self.context.set_default_timeout(STEP_MS)
        self.problems: list[str] = []
        self.page: Page = self.context.new_page()
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda exc: self.problems.append(f"page error: {exc}"))

    def _console(self, message: Any) -> None:
        if message.type == "error":
            self.problems.append(f"console error: {message.text}")

    def login(self, access_key: str, secret_key: str) -> None:
        self.page.goto(f"{self.url}/login")
        self.page.fill("input[name=access_key]", access_key)
        self.page.fill("input[name=secret_key]", secret_key)
        self.page.click("#login button")

    def open(self, path: str) -> Page:
        response = self.page.goto(f"{self.url}{path}")
        assert response is not None and response.ok, (path, response and response.status)
        return self.page

    def shoot(self, name: str) -> Path:
        target = self.shots / f"{name}.png"
        self.page.screenshot(path=str(target), full_page=True)
        assert target.stat().st_size > 0
        return target

    def csrf(self) -> str:
        return str(self.page.input_value("header input[name=csrf]"))

    def close(self) -> None:
        self.context.close()
