"""A local HTTP server that speaks text-generation-inference's API, for tests and benchmarks.

Real HTTP/1.1 on 127.0.0.1 (keep-alive, Content-Length, JSON bodies), the routes the LLM layer uses:
``GET /health``, ``GET /info``, ``GET /v1/models``, ``POST /generate`` (TGI's native route, with the
``grammar`` parameter) and ``POST /v1/chat/completions`` (the OpenAI-compatible route, with
``response_format``).  Behaviour that matters for a client is reproduced as TGI has it:

* past ``max_concurrency`` requests in flight the server answers at once with 429 and
  ``{"error": "Model is overloaded", "error_type": "overloaded"}``, as TGI's router does;
* malformed requests (no ``inputs``, a grammar that is not ``{"type": "json"|"regex", "value": ...}``)
  get 422 with ``error_type`` ``validation``;
* the grammar is honoured loosely: it is validated and recorded, and the default responder answers with
  a minimal object that satisfies the JSON schema; a scripted ``responder`` may still return anything
  (a model cut off at ``max_new_tokens`` breaks a grammar too).

Faults for tests: ``faults`` is consumed one per generation request (``"429"``, ``"503"``, ``"drop"``
(close the connection without an answer), ``"garbage"`` (non-JSON text), ``"hang"`` (answer after
``hang_s``), ``"ok"``); ``fault_rates`` draws them at random (seeded).  Counters: ``calls`` (every
generation request that reached the server, whatever the outcome), ``served`` (answered 200),
``overloaded`` (429s), ``injected`` (faults by kind), ``max_seen`` (most requests admitted at once),
``max_attempted`` (most generation requests open at once, refused ones included), ``requests``.

Never used by the library's production paths.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

GARBAGE = 'Sure! Here is the JSON you asked for:\n{"answer": "yes", "reason": "the text is about'
FAULTS = ("ok", "429", "503", "drop", "garbage", "hang")


def minimal_instance(schema: dict[str, Any], root: dict[str, Any] | None = None) -> Any:
    """A small JSON value satisfying ``schema`` (objects, arrays, scalars, enums, $ref, anyOf)."""
    root = root or schema
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return minimal_instance((root.get("$defs") or root.get("definitions") or {})[name], root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            options = [o for o in schema[key] if o.get("type") != "null"] or schema[key]
            return minimal_instance(options[0], root)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        required = schema.get("required", list(props))
        return {name: minimal_instance(props.get(name, {"type": "string"}), root) for name in required}
    if kind == "array":
        n = schema.get("minItems", 0)
        return [minimal_instance(schema.get("items", {"type": "string"}), root) for _ in range(n)]
    if kind == "string":
        return "x" * schema.get("minLength", 4)
    if kind == "integer":
        return int(schema.get("minimum", 0))
    if kind == "number":
        return float(schema.get("minimum", 0.0))
    if kind == "boolean":
        return False
    return None


def default_responder(request: dict[str, Any]) -> str:
    """A schema-conforming answer when a grammar is given, else an echo of the prompt's last line."""
    grammar = request.get("grammar")
    if grammar and grammar.get("type") in ("json", "json_object", "json_schema"):
        return json.dumps(minimal_instance(grammar.get("value") or {}))
    return request["prompt"].strip().splitlines()[-1] if request["prompt"].strip() else ""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (timeout) leaves a broken pipe behind: expected, not news."""


class FakeTGI:
    """Start with ``with FakeTGI(...) as tgi:``; ``tgi.url`` is the base URL for ``llm_endpoints``."""

    def __init__(
        self,
        responder: Callable[[dict[str, Any]], str] | None = None,
        *,
        latency: float = 0.0,
        max_concurrency: int = 4,
        model_id: str = "fake/model",
        reported_max_concurrency: int | None = None,
        faults: Iterable[str] = (),
        fault_rates: dict[str, float] | None = None,
        seed: int = 0,
        hang_s: float = 30.0,
        max_input_chars: int | None = None,
    ) -> None:
        self.responder = responder or default_responder
        self.latency = latency
        self.max_concurrency = max_concurrency
        self.model_id = model_id
        self.reported_max_concurrency = reported_max_concurrency or max_concurrency
        self.faults = list(faults)
        for fault in self.faults:
            if fault not in FAULTS:
                raise ValueError(f"unknown fault {fault!r} (one of {FAULTS})")
        self.fault_rates = dict(fault_rates or {})
        self.hang_s = hang_s
        self.max_input_chars = max_input_chars
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.calls = 0
        self.served = 0
        self.overloaded = 0
        self.injected: Counter[str] = Counter()
        self.in_flight = 0
        self.open_requests = 0
        self.max_seen = 0
        self.max_attempted = 0
        self.requests: list[dict[str, Any]] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None, "FakeTGI is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeTGI:
        self._server = _Server(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-tgi", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeTGI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reset_counters(self) -> None:
        """Zero the counters (between a first run and a rerun, say)."""
        with self._lock:
            self.calls = self.served = self.overloaded = self.max_seen = self.max_attempted = 0
            self.injected.clear()
            self.requests.clear()

    # -- behaviour -------------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        return {
            "model_id": self.model_id,
            "model_sha": None,
            "model_pipeline_tag": "text-generation",
            "max_concurrent_requests": self.reported_max_concurrency,
            "max_best_of": 2,
            "max_stop_sequences": 4,
            "max_input_tokens": 4095,
            "max_total_tokens": 4096,
            "validation_workers": 2,
            "max_client_batch_size": 4,
            "router": "text-generation-router",
            "version": "3.3.6-fake",
            "sha": None,
            "docker_label": None,
        }

    def stats(self) -> dict[str, Any]:
        """The counters as a dict (served at ``GET /_fake/stats`` too)."""
        with self._lock:
            return {
                "calls": self.calls,
                "served": self.served,
                "overloaded": self.overloaded,
                "max_seen": self.max_seen,
                "max_attempted": self.max_attempted,
                "injected": dict(self.injected),
            }

    def _next_fault(self) -> str:
        if self.faults:
            return self.faults.pop(0)
        roll = self._rng.random()
        acc = 0.0
        for fault, rate in sorted(self.fault_rates.items()):
            acc += rate
            if roll < acc:
                return fault
        return "ok"


def _handler_for(fake: FakeTGI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall
        server_version = "text-generation-router-fake"
        timeout = 120

        def log_message(self, format: str, *args: Any) -> None:
            return

        # -- plumbing ---------------------------------------------------------------------------
        def _send(self, status: int, payload: Any = None, headers: dict[str, str] | None = None) -> None:
            body = b"" if payload is None else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if body:
                self.wfile.write(body)

        def _drop(self) -> None:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        # -- routes -----------------------------------------------------------------------------
        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200)
            elif self.path == "/info":
                self._send(200, fake.info())
            elif self.path == "/v1/models":
                data = [{"id": fake.model_id, "object": "model", "owned_by": "fake", "created": 0}]
                self._send(200, {"object": "list", "data": data})
            elif self.path == "/_fake/stats":  # not TGI: counters, for a server run in another process
                self._send(200, fake.stats())
            else:
                self._send(404, {"error": "Not Found", "error_type": "not_found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.path not in ("/generate", "/v1/chat/completions"):
                self._send(404, {"error": "Not Found", "error_type": "not_found"})
                return
            try:
                body = json.loads(raw or b"null")
                request = _parse_request(self.path, body)
            except ValueError as exc:
                self._send(422, {"error": str(exc), "error_type": "validation"})
                return
            if fake.max_input_chars is not None and len(request["prompt"]) > fake.max_input_chars:
                self._send(
                    422,
                    {
                        "error": f"Input validation error: `inputs` must have less than "
                        f"{fake.max_input_chars} characters. Given: {len(request['prompt'])}",
                        "error_type": "validation",
                    },
                )
                return
            with fake._lock:
                fake.calls += 1
                fake.requests.append(request)
                fake.open_requests += 1
                fake.max_attempted = max(fake.max_attempted, fake.open_requests)
                fault = fake._next_fault()
                admitted = fault != "429" and fake.in_flight < fake.max_concurrency
                if admitted:
                    fake.in_flight += 1
                    fake.max_seen = max(fake.max_seen, fake.in_flight)
                else:
                    fake.overloaded += 1
                if fault != "ok":
                    fake.injected[fault] += 1
            released = not admitted
            try:
                if not admitted:
                    self._send(429, {"error": "Model is overloaded", "error_type": "overloaded"})
                    return
                if fault == "503":
                    self._release()
                    released = True
                    self._send(503, {"error": "Service Unavailable", "error_type": "unavailable"})
                    return
                if fault == "drop":
                    time.sleep(fake.latency / 2)
                    self._release()
                    released = True
                    self._drop()
                    return
                if fault == "hang":
                    time.sleep(fake.hang_s)
                time.sleep(fake.latency)
                text = GARBAGE if fault == "garbage" else fake.responder(request)
                # Free the slot before answering, as TGI does when generation ends: a client that
                # starts its next request on receipt of this answer must find the slot free.
                self._release()
                released = True
                self._send(200, _render_answer(self.path, request, text, fake.model_id))
                with fake._lock:
                    fake.served += 1
            finally:
                if not released:
                    self._release()
                with fake._lock:
                    fake.open_requests -= 1

        def _release(self) -> None:
            with fake._lock:
                fake.in_flight -= 1

    return Handler


def _parse_request(route: str, body: Any) -> dict[str, Any]:
    """Validate a generation request the way TGI's router does (loosely) and normalise it."""
    if not isinstance(body, dict):
        raise ValueError("Failed to deserialize the JSON body into the target type")
    if route == "/generate":
        inputs = body.get("inputs")
        if not isinstance(inputs, str):
            raise ValueError("Failed to deserialize the JSON body: missing field `inputs`")
        params = body.get("parameters") or {}
        if not isinstance(params, dict):
            raise ValueError("`parameters` must be an object")
        grammar = params.get("grammar")
        if grammar is not None:
            if not isinstance(grammar, dict) or grammar.get("type") not in ("json", "json_object", "regex"):
                raise ValueError("grammar: unknown variant, expected `json` or `regex`")
            if "value" not in grammar:
                raise ValueError("grammar: missing field `value`")
        temperature = params.get("temperature")
        if temperature is not None and temperature <= 0:
            raise ValueError("Input validation error: `temperature` must be strictly positive")
        return {"route": route, "prompt": inputs, "parameters": params, "grammar": grammar, "messages": None}
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("Failed to deserialize the JSON body: missing field `messages`")
    params = {k: v for k, v in body.items() if k != "messages"}
    grammar = None
    fmt = body.get("response_format")
    if isinstance(fmt, dict):
        if fmt.get("type") == "json_schema":
            grammar = {"type": "json_schema", "value": (fmt.get("json_schema") or {}).get("schema") or {}}
        elif fmt.get("type") in ("json", "json_object"):
            grammar = {"type": "json", "value": fmt.get("value") or fmt.get("schema") or {}}
    prompt = "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
    return {"route": route, "prompt": prompt, "parameters": params, "grammar": grammar, "messages": messages}


def _render_answer(route: str, request: dict[str, Any], text: str, model_id: str) -> dict[str, Any]:
    tokens = max(1, len(text.split()))
    prompt_tokens = max(1, len(request["prompt"].split()))
    if route == "/generate":
        return {
            "generated_text": text,
            "details": {"finish_reason": "eos_token", "generated_tokens": tokens, "seed": None},
        }
    return {
        "id": f"fake-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_id,
        "system_fingerprint": "3.3.6-fake",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": tokens,
            "total_tokens": prompt_tokens + tokens,
        },
    }


class FakeTGIProcess:
    """A :class:`FakeTGI` in a child process, as a real server would be (for benchmarks: the client's
    threads and the server's then do not share one interpreter lock).  ``stats()`` reads the counters.
    """

    def __init__(
        self, *, latency: float, max_concurrency: int, answer: str, model_id: str = "fake/model"
    ) -> None:
        self.args = [
            "--latency", str(latency), "--max-concurrency", str(max_concurrency),
            "--answer", answer, "--model-id", model_id,
        ]  # fmt: skip
        self.proc: Any = None
        self.url = ""

    def __enter__(self) -> FakeTGIProcess:
        import subprocess
        import sys
        from pathlib import Path

        root = Path(__file__).resolve().parents[2]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.tgi_server", *self.args],
            cwd=root,
            stdout=subprocess.PIPE,
            stdin=subprocess.PIPE,
            text=True,
        )
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://127.0.0.1:"):
            self.__exit__()
            raise RuntimeError(f"fake TGI process did not start: {self.url!r}")
        return self

    def stats(self) -> dict[str, Any]:
        import httpx

        return httpx.get(self.url + "/_fake/stats").json()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.stdin.close()  # the child exits when its stdin closes
            try:
                self.proc.wait(timeout=10)
            except Exception:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


def _main() -> None:
    import argparse
    import sys

    parser = argparse.ArgumentParser(description="Serve a fake TGI on 127.0.0.1 until stdin closes.")
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--max-concurrency", type=int, default=4)
    parser.add_argument("--answer", default=None, help="fixed generated text (default: schema-based)")
    parser.add_argument("--model-id", default="fake/model")
    args = parser.parse_args()
    responder = (lambda request: args.answer) if args.answer is not None else None
    with FakeTGI(
        responder, latency=args.latency, max_concurrency=args.max_concurrency, model_id=args.model_id
    ) as tgi:
        print(tgi.url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    _main()
