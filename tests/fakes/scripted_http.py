"""A raw HTTP/1.1 server on 127.0.0.1 whose answers are scripted byte for byte, for broken-answer tests.

The GitHub and TGI fakes speak their protocols correctly; this one speaks it *badly* on purpose: a
route answers with whatever a test script returns, including what no well-behaved server sends (a
200 with an HTML page, a body shorter than its ``Content-Length``, a corrupt gzip body, an SSE stream,
a redirect to another host, a connection closed mid-body).  Every request is logged with its headers,
so tests can check that a token never reached the wrong host.

Use::

    def route(req: Request) -> Answer: ...
    with ScriptedHTTP({"/search/repositories": route}) as srv:
        srv.url  # http://127.0.0.1:PORT

Unknown paths answer 404 ``{"message": "Not Found"}``.
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Request:
    """What the server received."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass
class Answer:
    """What to send back.  ``body`` may be bytes, str, or any JSON value (``json_body``)."""

    status: int = 200
    body: bytes | str = b""
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json; charset=utf-8"
    truncate_to: int | None = None  # send only this many body bytes, then close (Content-Length stays)
    gzip_corrupt: bool = False  # Content-Encoding: gzip with a body that is not valid gzip
    gzip: bool = False  # a valid gzip body
    drop: bool = False  # close the connection without any answer

    @classmethod
    def json_body(cls, value: Any, status: int = 200, **kw: Any) -> Answer:
        return cls(status=status, body=json.dumps(value).encode(), **kw)


Route = Callable[[Request], Answer]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Dropped connections are the point here."""


class ScriptedHTTP:
    """Start with ``with ScriptedHTTP(routes) as srv:``; ``srv.log`` lists every :class:`Request`."""

    def __init__(self, routes: dict[str, Route]) -> None:
        self.routes = dict(routes)
        self.log: list[Request] = []
        self._lock = threading.Lock()
        self._server: _Server | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def count(self, path: str) -> int:
        with self._lock:
            return sum(1 for r in self.log if r.path == path)

    def __enter__(self) -> ScriptedHTTP:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 30

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _handle(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                req = Request(
                    self.command,
                    parts.path,
                    {k: v[-1] for k, v in parse_qs(parts.query).items()},
                    {k.lower(): v for k, v in self.headers.items()},
                    body,
                )
                with fake._lock:
                    fake.log.append(req)
                route = fake.routes.get(parts.path)
                answer = route(req) if route else Answer.json_body({"message": "Not Found"}, 404)
                self._answer(answer)

            def _answer(self, a: Answer) -> None:
                if a.drop:
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return
                body = a.body.encode() if isinstance(a.body, str) else a.body
                if a.gzip:
                    body = gzip.compress(body)
                if a.gzip_corrupt:
                    body = b"\x1f\x8b\x08\x00garbage-not-deflate" + body[:50]
                self.send_response(a.status)
                self.send_header("Content-Type", a.content_type)
                if a.gzip or a.gzip_corrupt:
                    self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(body)))
                for k, v in a.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                if self.command == "HEAD":
                    return
                if a.truncate_to is not None:
                    self.wfile.write(body[: a.truncate_to])
                    self.wfile.flush()
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return
                self.wfile.write(body)

            do_GET = do_POST = do_HEAD = _handle

        self._server = _Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


__all__ = ["Answer", "Request", "Route", "ScriptedHTTP"]
