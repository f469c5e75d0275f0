"""A server process an engine job starts: on the loopback, on a free port (another one where the port
was taken between choosing and binding it), waited for until healthy, and stopped on every exit path:
in a `finally` (SIGTERM, then SIGKILL after 10 s), on the job's SIGTERM (`exit_on_sigterm`), and by the
kernel when the job dies without unwinding (`die_with_parent`). llama.cpp's server and any server the
OpenAI engine launches (orthrus/engines/openai_launch.py) run through it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

HOST = "127.0.0.1"  # loopback only: nothing listens beyond this machine
START_TIMEOUT_S = 300


class ServerError(Exception):
    """The server could not start, died, or answered something the study cannot use; names which."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def die_with_parent() -> None:
    """In the server's process, before it runs: on Linux, the kernel sends it SIGTERM when the process
    that started it dies, even by SIGKILL, where no `finally` runs."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)  # the `finally` that stops the server runs


class Server:
    """`with Server(binary, args_for_port, log) as url:` a started server's base URL; stopped on exit.
    `health`: the path that answers 200 once the server serves; `env`: the process's environment
    (default this one's); `name`: the server's name in messages."""

    def __init__(
        self,
        binary: str,
        args_for_port,
        log_path: str,
        tries: int = 3,
        health: str = "/health",
        env: dict | None = None,
        name: str = "llama-server",
        start_timeout_s: float = START_TIMEOUT_S,
    ):
        self.binary, self.args_for_port, self.log_path, self.tries = binary, args_for_port, log_path, tries
        self.health, self.env, self.name, self.start_timeout_s = health, env, name, start_timeout_s
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> str:
        for attempt in range(self.tries):
            port = free_port()
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [self.binary, *self.args_for_port(port)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    preexec_fn=die_with_parent,
                    env=self.env if self.env is not None else os.environ.copy(),
                )
            url = f"http://{HOST}:{port}"
            try:
                self._wait(url)
                return url
            except ServerError:
                self.stop()
                text = Path(self.log_path).read_text(errors="replace")[-3000:]
                if "bind" in text.lower() and attempt + 1 < self.tries:
                    continue  # the port was taken after we chose it: another one
                raise ServerError(f"{self.name} did not start: {self.log_path} ends:\n{text}") from None
        raise ServerError(f"{self.name} did not start")  # unreachable: the last try raises

    def _wait(self, url: str) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(f"{self.name} exited with {self.proc.returncode} while starting")
            try:
                with urllib.request.urlopen(f"{url}{self.health}", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass  # still loading (503) or not yet listening
            time.sleep(0.25)
        raise ServerError(f"{self.name} not healthy after {self.start_timeout_s:g} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __exit__(self, *exc) -> None:
        self.stop()
