"""The load audit's planted control (an entry's `planted: true`): a proxy in front of the server that
changes a greedy request only while another request is in flight, as a scheduler bug that leaks one
request's sampling settings into its batch would: the request is sampled at temperature 1 (seeded, so
a rerun is the same) instead of taken greedily. Alone, a request passes through untouched, so the
planted server's output at concurrency 1 is the honest server's, and every divergence it shows under
load is a token its own log-probabilities do not rank first: the audit must call it `structural`
(the claim `planted-load-caught`). The proxy listens on the loopback, in a thread of the job's process,
and stops with the run.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from orthrus.engines.openai_api import Load
from orthrus.engines.server import HOST

PLANTED_TEMPERATURE = 1.0


class _Refuse(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args):
        return None  # a redirect goes back to the client, which refuses it (orthrus/engines/openai_http.py)


NO_REDIRECTS = urllib.request.build_opener(_Refuse)


def perturbed(body: dict, in_flight: int) -> dict:
    """The request the server gets: a greedy one sampled at temperature 1 where others are in flight."""
    if in_flight <= 1 or float(body.get("temperature", 1.0)) > 0:
        return body
    return body | {"temperature": PLANTED_TEMPERATURE, "top_k": -1, "top_p": 1.0, "seed": 1234}


class PlantedProxy:
    """`with PlantedProxy(upstream) as url:` the proxy's base URL; `self.perturbed` counts the requests it
    changed."""

    def __init__(self, upstream: str):
        self.upstream, self.load, self.perturbed = upstream, Load(), 0
        self.server: ThreadingHTTPServer | None = None

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _fetch(self, req) -> tuple[int, bytes]:
                try:
                    with NO_REDIRECTS.open(req, timeout=600) as r:
                        return r.status, r.read()
                except urllib.error.HTTPError as e:
                    return e.code, e.read()

            def _send(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send(*self._fetch(urllib.request.Request(f"{proxy.upstream}{self.path}")))

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                n = proxy.load.enter()
                try:
                    sent = perturbed(body, n) if self.path.endswith(("/completions", "/completion")) else body
                    if sent is not body:
                        with proxy.load.lock:
                            proxy.perturbed += 1
                    req = urllib.request.Request(
                        f"{proxy.upstream}{self.path}",
                        data=json.dumps(sent).encode(),
                        headers={"Content-Type": "application/json"},
                    )
                    answer = self._fetch(req)
                finally:
                    # out of flight before the client has its answer: its next request must not meet
                    # this one still counted
                    proxy.load.leave()
                self._send(*answer)

        return Handler

    def __enter__(self) -> str:
        self.server = ThreadingHTTPServer((HOST, 0), self._handler())
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://{HOST}:{self.server.server_address[1]}"

    def __exit__(self, *exc) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
