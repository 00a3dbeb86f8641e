"""The DAGs `make demo` runs, in pipeline order; prints the ids whose files exist."""

from __future__ import annotations

from pathlib import Path

DAGS_DIR = Path(__file__).resolve().parents[2] / "dags"
ORDER = [
    "scicodepile_smoke",
    "scicodepile_crawl",
    "scicodepile_curate",
    "scicodepile_annotate",
    "scicodepile_benchmark",
    "scicodepile_evaluate",
]


def demo_dags() -> list[str]:
    return [dag for dag in ORDER if (DAGS_DIR / f"{dag}.py").exists()]


if __name__ == "__main__":
    print(" ".join(demo_dags()))
