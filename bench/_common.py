"""Shared helpers for benchmarks: each benchmark prints exactly one JSON line.

``{"bench": ..., "metric": ..., "ours": ..., "peer": ..., "peer_name": ..., "ratio": ...}`` plus any
extra fields.  Peers run in the same process or the same run, on the same input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for sub in ("include", "plugins", "."):
    if str(ROOT / sub) not in sys.path:
        sys.path.insert(0, str(ROOT / sub))


def emit(
    bench: str,
    metric: str,
    ours: float,
    peer: float,
    peer_name: str,
    *,
    higher_is_better: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    """Print the one JSON line.  ``ratio`` > 1 always means "ours is better"."""
    if higher_is_better:
        ratio = ours / peer if peer else float("inf")
    else:
        ratio = peer / ours if ours else float("inf")
    line = {
        "bench": bench,
        "metric": metric,
        "ours": round(ours, 4),
        "peer": round(peer, 4),
        "peer_name": peer_name,
        "ratio": round(ratio, 4),
        **extra,
    }
    print(json.dumps(line), flush=True)
    return line
