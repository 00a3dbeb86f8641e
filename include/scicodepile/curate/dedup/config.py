"""The one validated configuration shared by every MinHash pass (signatures, index, clusters).

Defaults follow The Stack v2: 5-token shingles, 250 permutations in 25 bands of 10 rows, target Jaccard
similarity 0.7, plus one addition of ours: LSH candidates are verified against the full signature before
they are joined (``verify``).  The slug names the outputs (``minhash-5g-250p-25b-0.7``) so two
configurations never overwrite each other's signature shards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scicodepile.errors import ConfigError

if TYPE_CHECKING:
    from scicodepile.settings import Settings

_MAX_THRESHOLD_GAP = 0.1
"""How far the LSH S-curve's midpoint ``(1/bands)**(1/rows)`` may sit from ``threshold``."""


@dataclass(frozen=True)
class MinhashConfig:
    """Near-duplicate parameters.

    ``bands * rows`` must equal ``num_perm``.  Candidate pairs are documents that agree on all ``rows``
    MinHash values of at least one band; LSH puts the similarity at which that happens with probability
    1/2 near ``(1/bands)**(1/rows)`` (0.725 for 25 x 10), so the config is rejected when that point is
    more than 0.1 away from ``threshold``: a threshold the bands cannot express would be a silent lie.

    ``verify`` (default on): a candidate pair is joined only when the Jaccard estimated from all
    ``num_perm`` values (the fraction of equal minima; standard error ``sqrt(J(1-J)/num_perm)``, 0.03 at
    J = 0.7) reaches ``threshold``.  Band collisions alone (what datatrove and The Stack's pipeline
    use) join a pair of Jaccard 0.5 with probability 2.4 % and 0.6 with 14 %; verification removes
    those false positives and makes repeated runs agree more (bench/dedup.py measures it).  It costs
    ``4 * num_perm`` bytes per document in the signature shards and in a file under the index's
    ``workdir``; ``verify=False`` (slug suffix ``-noverify``) is the plain LSH of the references.
    """

    ngram: int = 5
    num_perm: int = 250
    bands: int = 25
    rows: int = 10
    threshold: float = 0.7
    seed: int = 1
    verify: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.verify, bool):
            raise ConfigError(
                f"minhash verify must be a boolean, got {self.verify!r}", setting="SCICODEPILE_DEDUP_VERIFY"
            )
        for name in ("ngram", "num_perm", "bands", "rows"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(
                    f"minhash {name} must be a positive integer, got {value!r}",
                    setting=f"SCICODEPILE_DEDUP_{name.upper()}",
                )
        if self.bands * self.rows != self.num_perm:
            raise ConfigError(
                f"minhash bands*rows must equal num_perm: {self.bands}*{self.rows} != {self.num_perm}",
                setting="SCICODEPILE_DEDUP_NUM_PERM",
            )
        if not 0.0 < self.threshold < 1.0:
            raise ConfigError(
                f"minhash threshold must lie in (0, 1), got {self.threshold!r}",
                setting="SCICODEPILE_DEDUP_THRESHOLD",
            )
        if abs(self.lsh_threshold - self.threshold) > _MAX_THRESHOLD_GAP:
            raise ConfigError(
                f"{self.bands} bands of {self.rows} rows put the LSH threshold at {self.lsh_threshold:.3f}, "
                f"too far from threshold {self.threshold}; choose bands/rows with (1/bands)**(1/rows) "
                "near the threshold",
                setting="SCICODEPILE_DEDUP_BANDS",
            )
        if not 0 <= self.seed < 2**32:
            raise ConfigError(
                f"minhash seed must be in [0, 2**32), got {self.seed!r}", setting="SCICODEPILE_DEDUP_SEED"
            )

    @property
    def lsh_threshold(self) -> float:
        """Similarity at which a pair becomes a candidate with probability about 1/2."""
        return (1.0 / self.bands) ** (1.0 / self.rows)

    def candidate_probability(self, similarity: float) -> float:
        """Probability that two documents of Jaccard ``similarity`` collide in at least one band."""
        return 1.0 - (1.0 - similarity**self.rows) ** self.bands

    @property
    def min_equal(self) -> int:
        """Equal minima (out of ``num_perm``) a verified pair needs: ``ceil(threshold * num_perm)``."""
        return math.ceil(self.threshold * self.num_perm - 1e-9)

    @property
    def slug(self) -> str:
        """Deterministic name for output keys: ``minhash-5g-250p-25b-0.7`` (``-s<seed>`` if the seed is
        not 1, ``-noverify`` without verification)."""
        slug = f"minhash-{self.ngram}g-{self.num_perm}p-{self.bands}b-{self.threshold:g}"
        if self.seed != 1:
            slug += f"-s{self.seed}"
        return slug if self.verify else f"{slug}-noverify"

    @property
    def band_columns(self) -> list[str]:
        """Names of the per-band hash columns of a signature shard."""
        return [f"band_{b:03d}" for b in range(self.bands)]

    @classmethod
    def from_settings(cls, settings: Settings) -> MinhashConfig:
        """The config named by the ``dedup_*`` settings."""
        return cls(
            ngram=settings.dedup_ngram,
            num_perm=settings.dedup_num_perm,
            bands=settings.dedup_bands,
            rows=settings.dedup_rows,
            threshold=settings.dedup_threshold,
            seed=settings.dedup_seed,
            verify=settings.dedup_verify,
        )
