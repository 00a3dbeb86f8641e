"""The license filter: SPDX from metadata or the LICENSE file, checked against the policy setting."""

from __future__ import annotations

from pathlib import Path

from scicodepile.curate.filters.metadata import RepoView
from scicodepile.curate.licenses import license_allowed, resolve_license
from scicodepile.pipeline import Filter, Verdict


class LicenseFilter(Filter[RepoView]):
    """Resolves the repository's license (written back to ``record.license``) and applies the
    policy: ``no_license`` and ``license_not_permitted`` are the rejection reasons."""

    name = "license"

    def __init__(
        self,
        policy: str = "permissive",
        root: Path | None = None,
        files: list[str] | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.policy = policy
        self.root = root
        self.files = files or []

    def filter(self, record: RepoView) -> Verdict:
        """Resolve and check; the source of the answer goes into ``record.extra['license_source']``."""
        spdx, source = resolve_license(record.license, self.root, self.files)
        record.extra["license_source"] = source
        record.extra["license_metadata"] = record.license
        record.license = spdx
        ok, reason = license_allowed(spdx, self.policy)
        if ok:
            return Verdict.ok()
        return Verdict.drop(reason or "license_not_permitted", f"{spdx or 'none found'} under {self.policy}")
