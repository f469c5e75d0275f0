"""One run's exchanges with a server the audit does not control (issue 62): every request, its answer's
headers and its body bounded by the run's one deadline, each body by MAX_BODY_BYTES, JSON objects only,
no redirect followed, and a transient failure retried a bounded number of times.

`Session` is one run's dealings with its server: its deadline (`timeout_s` from the run's start, the
checks before the prompts included), the connections it has open, the retries it needed. A watchdog
thread cuts every open connection (shuts its socket down) when the deadline passes or the run stops,
so no read outlives the bound, whether the server is silent or trickles its answer a byte at a time:
a read only times out on a silent socket, and a cut ends it at once.

Retried: an answer of 429, 500, 502 or 503 and a connection dropped before the whole answer came
(what a server under load does now and then), RETRIES times after the first try, waiting BACKOFF_S,
then twice that, and so on, never past the deadline. Anything else (a 4xx, a redirect, a body that is
not JSON) is the server's answer and ends the run; the error names the server, the request and what
was wrong, in one line.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from urllib.parse import urlsplit

from orthrus.engines.server import ServerError

MAX_BODY_BYTES = 16 * 2**20  # a completion of a few thousand tokens with top-2 log-probabilities is < 2 MB
RETRY_STATUSES = (429, 500, 502, 503)
RETRIES = 3  # tries after the first, waiting 0.5, 1, 2 s
BACKOFF_S = 0.5
QUOTE = 300  # characters of an answer quoted in an error
DROPPED = (ConnectionError, http.client.RemoteDisconnected, http.client.IncompleteRead, http.client.BadStatusLine)


class Late(ServerError):
    """The run's time bound passed: names the server and what the run was waiting for."""


class Stopped(ServerError):
    """The run stopped (another request failed) while this one was under way."""


class Transient(ServerError):
    """A failure a retry may cure (a busy or restarting server, a dropped connection)."""


def quote(data: bytes | str) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return repr(text[:QUOTE] + ("..." if len(text) > QUOTE else ""))


class Session:
    """`with Session(url, timeout_s) as s:` one run's dealings with the server at `url` (its deadline
    `timeout_s` from now, or `deadline`, a time.monotonic(); `name` the server in messages, default
    `url`); `s.call(...)` one JSON request;
    `s.retries` the retries it needed. Leaving the block cuts what is still open."""

    def __init__(self, url: str, timeout_s: float, deadline: float | None = None, name: str = ""):
        self.url, self.timeout_s = url.rstrip("/"), float(timeout_s)
        self.name = name or self.url  # the server as messages name it (the planted proxy's upstream)
        # a run's checks and its requests (through the planted proxy: another address) share one deadline
        self.deadline = time.monotonic() + self.timeout_s if deadline is None else deadline
        self.lock, self.live, self.retries = threading.Lock(), set(), 0
        self.over = threading.Event()  # set at the deadline or when the run stops: every connection cut
        self.watchdog = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> Session:
        self.watchdog.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _watch(self) -> None:
        self.over.wait(max(self.deadline - time.monotonic(), 0))
        self.stop()

    def stop(self) -> None:
        """Cut every open connection: a request waiting on one ends now."""
        with self.lock:
            self.over.set()
            live, self.live = list(self.live), set()
        for conn in live:
            _cut(conn)

    def late(self, waiting_for: str) -> ServerError:
        """Why a request ended early: the deadline (naming what it waited for) or the run's stop."""
        if self.left() > 0:
            return Stopped(f"the server at {self.name}: stopped while waiting for {waiting_for}")
        return Late(
            f"the server at {self.name}: the run's time bound (timeout_s = {self.timeout_s:g} s) passed "
            f"while waiting for {waiting_for}"
        )

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def call(self, method: str, path: str, body: dict | None, what: str) -> dict:
        """The JSON object the server answers to `method path` (with `body`), retried where transient;
        `what` names the request in errors ("prompt p3", "the check request")."""
        for attempt in range(RETRIES + 1):
            try:
                return self._once(method, path, body, what)
            except Transient as e:
                wait = BACKOFF_S * 2**attempt
                if attempt == RETRIES:
                    raise ServerError(f"{e} (still, after {RETRIES} retries)") from None
                if self.left() <= wait:  # the bound would pass before the retry: it is what ends the run
                    raise Late(
                        f"the server at {self.name}: the run's time bound (timeout_s = {self.timeout_s:g} s) "
                        f"leaves no time to retry {what} ({method} {path}); the last try: {e}"
                    ) from None
                with self.lock:
                    self.retries += 1
                if self.over.wait(wait):  # the run stopped (its bound, or another request's failure)
                    raise self.late(f"a retry of {what} ({method} {path})") from None
        raise AssertionError("unreachable")

    def _open(self, where) -> http.client.HTTPConnection:
        left = self.left()
        if left <= 0 or self.over.is_set():
            raise self.late(f"{where} to start")
        parts = urlsplit(self.url)
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = kind(parts.hostname, parts.port, timeout=left)
        with self.lock:
            if self.over.is_set():
                raise self.late(f"{where} to start")
            self.live.add(conn)
        return conn

    def _once(self, method: str, path: str, body: dict | None, what: str) -> dict:
        where = f"{what} ({method} {path})"
        prefix = urlsplit(self.url).path
        conn = self._open(where)
        phase = f"the answer to {where}"
        try:
            data = None if body is None else json.dumps(body).encode()
            conn.request(method, prefix + path, body=data, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            phase = f"the body of the answer to {where}"
            raw = self._body(r, where)
        except (OSError, http.client.HTTPException) as e:
            if self.over.is_set() or self.left() <= 0:
                raise self.late(phase) from None
            if isinstance(e, DROPPED):
                raise Transient(f"the server at {self.name}, {where}: connection dropped ({e!r})") from None
            raise ServerError(f"the server at {self.name}, {where}: no answer ({e!r})") from None
        finally:
            with self.lock:
                self.live.discard(conn)
            conn.close()
        return self._json(r, raw, where)

    def _body(self, r: http.client.HTTPResponse, where: str) -> bytes:
        """The whole body, read a piece at a time so that neither its size nor its time is unbounded."""
        length = r.getheader("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > MAX_BODY_BYTES:
            raise ServerError(
                f"the server at {self.name}, {where}: an answer of {int(length)} bytes, over {MAX_BODY_BYTES}"
            )
        got, n = [], 0
        while chunk := r.read1(65536):
            n += len(chunk)
            if n > MAX_BODY_BYTES:
                raise ServerError(f"the server at {self.name}, {where}: an answer over {MAX_BODY_BYTES} bytes")
            got.append(chunk)
            if self.over.is_set() or self.left() <= 0:
                raise TimeoutError("the deadline")
        if self.over.is_set():  # a cut connection reads as the end of a body without a length
            raise TimeoutError("the deadline")
        if r.length:  # fewer bytes than its Content-Length: the connection closed mid-body
            raise http.client.IncompleteRead(b"".join(got), r.length)
        return b"".join(got)

    def _json(self, r: http.client.HTTPResponse, raw: bytes, where: str) -> dict:
        head = f"the server at {self.name}, {where}"
        if r.status in RETRY_STATUSES:
            raise Transient(f"{head}: answered {r.status}: {quote(raw)}")
        if 300 <= r.status < 400:
            raise ServerError(
                f"{head}: answered {r.status}, a redirect to {r.getheader('Location')!r}, not followed "
                "(give the server's own address)"
            )
        if r.status != 200:
            raise ServerError(f"{head}: answered {r.status}: {quote(raw)}")
        kind = r.getheader("Content-Type")
        if kind is not None and "json" not in kind.lower():
            raise ServerError(f"{head}: answered Content-Type {kind!r}, not JSON: {quote(raw)}")
        try:
            answer = json.loads(raw)
        except ValueError:
            raise ServerError(f"{head}: answered 200 with a body that is not JSON: {quote(raw)}") from None
        if not isinstance(answer, dict):
            raise ServerError(f"{head}: answered 200 with JSON that is not an object: {quote(raw)}")
        if "error" in answer and "choices" not in answer and "tokens" not in answer:
            raise ServerError(f"{head}: answered 200 with an error object: {quote(json.dumps(answer['error']))}")
        return answer


def _cut(conn: http.client.HTTPConnection) -> None:
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed
