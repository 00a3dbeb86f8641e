"""Near-dedup against a real S3 server (SeaweedFS): shards written and indexed through S3."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from scicodepile.curate.dedup import (
    MinhashConfig,
    find_duplicate_clusters,
    select_keepers,
    write_signature_shard,
)
from scicodepile.store import open_store
from scicodepile.store.keys import manifest_key

pytestmark = pytest.mark.integration


def _docs() -> list[tuple[str, str]]:
    rng = random.Random(4)
    vocab = [f"sym{i}" for i in range(2000)]
    docs = []
    for i in range(30):
        tokens = [rng.choice(vocab) for _ in range(300)]
        docs.append((f"f{i:03d}", " ".join(tokens)))
        if i % 5 == 0:  # a near copy: 1 % of tokens changed
            copy = [rng.choice(vocab) if rng.random() < 0.01 else t for t in tokens]
            docs.append((f"f{i:03d}-copy", " ".join(copy)))
    return docs


def test_dedup_through_s3_matches_local(s3_settings, local_settings, tmp_path: Path) -> None:
    config = MinhashConfig()
    docs = _docs()
    results = []
    for settings in (s3_settings, local_settings):
        store = open_store(settings)
        keys = []
        for shard in range(3):
            key = f"minhash/{config.slug}/sig-{shard:05d}.parquet"
            manifest = write_signature_shard(store, key, docs[shard::3], config)
            assert store.exists(manifest_key(key)) and manifest["rows"] == len(docs[shard::3])
            keys.append(key)
        results.append(find_duplicate_clusters(store, keys, config, tmp_path / settings.store_backend))
    on_s3, local = results
    assert on_s3 == local
    assert on_s3 == {f"f{i:03d}{s}": f"f{i:03d}" for i in range(0, 30, 5) for s in ("", "-copy")}
    # keep the original (rank 0), drop the copy
    assert select_keepers(on_s3, lambda d: (d.endswith("-copy"),)) == {
        f"f{i:03d}-copy" for i in range(0, 30, 5)
    }
