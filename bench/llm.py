"""LLM client throughput against a TGI-speaking server with a fixed latency and concurrency cap.

metric ``capacity_share`` = requests/s the client sustains / the server's capacity (cap / latency).
ours = :meth:`scicodepile.llm.LLMClient.structured_many` (the real path: /info-bounded concurrency,
validation, SQLite cache writes); peer = the common naive asyncio client in the same run, on the same
server and prompts: ``asyncio.gather`` over every request at once with ``httpx.AsyncClient``, retrying
a 429 after a fixed pause, unbounded.  Both are measured against the same ``FakeTGI``, run in its own
process as a real server is (real HTTP on 127.0.0.1).  Extra fields: the 429s each side provoked, and
a plain sequential client's share.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

import httpx
from pydantic import BaseModel

from _common import emit
from scicodepile.db import migrate
from scicodepile.llm import get_llm
from scicodepile.settings import load_settings
from tests.fakes.tgi_server import FakeTGIProcess

LATENCY = float(os.environ.get("BENCH_LLM_LATENCY", "0.1"))
CAP = int(os.environ.get("BENCH_LLM_CAP", "8"))
REQUESTS = int(os.environ.get("BENCH_LLM_REQUESTS", "400"))
PEER_PAUSE = float(os.environ.get("BENCH_LLM_PEER_PAUSE", "0.05"))


class Echo(BaseModel):
    echo: str
    length: int


ANSWER = json.dumps({"echo": "ok", "length": 2})


def _ours(url: str, var_dir: Path, texts: list[str]) -> float:
    settings = load_settings(var_dir=var_dir, llm_endpoints=url, llm_max_concurrency=256)
    migrate(settings)
    with get_llm(settings) as client:
        # warm-up (connections, ORM set-up, /info): "sustained" excludes one-time start-up costs
        client.structured_many("echo_test", [{"text": f"warm-up {i}"} for i in range(2 * CAP)], Echo)
        start = time.perf_counter()
        results = client.structured_many("echo_test", [{"text": t} for t in texts], Echo, max_new_tokens=32)
        elapsed = time.perf_counter() - start
    assert all(r.ok and not r.cached for r in results), "benchmark answers must all be fresh and valid"
    return len(texts) / elapsed


async def _peer_async(url: str, prompts: list[str]) -> float:
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=None)) as http:

        async def one(prompt: str) -> str:
            while True:
                r = await http.post(
                    "/generate", json={"inputs": prompt, "parameters": {"max_new_tokens": 32}}
                )
                if r.status_code == 200:
                    return Echo.model_validate_json(r.json()["generated_text"]).echo
                await asyncio.sleep(PEER_PAUSE)

        await asyncio.gather(*(one(f"warm-up {i}") for i in range(CAP)))  # open connections first
        start = time.perf_counter()
        await asyncio.gather(*(one(p) for p in prompts))
        return len(prompts) / (time.perf_counter() - start)


def _sequential(url: str, prompts: list[str]) -> float:
    with httpx.Client(base_url=url, timeout=60) as http:
        start = time.perf_counter()
        for p in prompts:
            http.post(
                "/generate", json={"inputs": p, "parameters": {"max_new_tokens": 32}}
            ).raise_for_status()
        return len(prompts) / (time.perf_counter() - start)


def main() -> None:
    capacity = CAP / LATENCY
    texts = [f"benchmark item {i}" for i in range(REQUESTS)]
    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeTGIProcess(latency=LATENCY, max_concurrency=CAP, answer=ANSWER) as tgi,
    ):
        ours_rps = _ours(tgi.url, Path(tmp) / "var", texts)
        ours = tgi.stats()
        peer_rps = asyncio.run(_peer_async(tgi.url, [f"peer {t}" for t in texts]))
        peer = tgi.stats()
        seq_rps = _sequential(tgi.url, [f"seq {t}" for t in texts[: max(4, CAP * 2)]])
    ours_429, ours_max = ours["overloaded"], ours["max_attempted"]
    peer_429 = peer["overloaded"] - ours_429
    emit(
        "llm",
        "capacity_share",
        ours_rps / capacity,
        peer_rps / capacity,
        "naive asyncio.gather + httpx.AsyncClient, fixed-pause unbounded 429 retry",
        requests=REQUESTS,
        latency_s=LATENCY,
        server_cap=CAP,
        ours_rps=round(ours_rps, 1),
        peer_rps=round(peer_rps, 1),
        ours_429=ours_429,
        peer_429=peer_429,
        ours_max_in_flight=ours_max,
        sequential_share=round(seq_rps / capacity, 4),
        target=0.9,
    )


if __name__ == "__main__":
    main()
