"""The docs-only filter: repositories with no code in the target languages, or too little of it.

The share is code bytes / (code bytes + documentation bytes), where documentation is prose files
(Markdown, reStructuredText, text, HTML, LaTeX, notebooks' markdown is not counted).  Data files are
left out of the share so that a genuine code repository shipping large data is not called docs-only.
"""

from __future__ import annotations

from collections.abc import Iterable

from scicodepile.curate.extract import ExtractedFile
from scicodepile.curate.filters.metadata import RepoView
from scicodepile.pipeline import Filter, Verdict

DOC_EXTENSIONS = (".md", ".markdown", ".rst", ".txt", ".html", ".htm", ".tex", ".adoc", ".org", ".pdf")


def code_share(files: Iterable[ExtractedFile], languages: frozenset[str]) -> tuple[int, int, float]:
    """(code bytes in target languages, documentation bytes, code share)."""
    code = docs = 0
    for f in files:
        if f.language in languages and f.reason not in ("vendored",):
            code += f.size
        elif f.path.lower().endswith(DOC_EXTENSIONS):
            docs += f.size
    share = code / (code + docs) if code + docs else 0.0
    return code, docs, share


class DocsOnlyFilter(Filter[RepoView]):
    """Rejects repositories whose code share (``record.extra['code_share']``) is below ``min_share``."""

    name = "docs_only"

    def __init__(self, min_share: float = 0.1, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.min_share = min_share

    def filter(self, record: RepoView) -> Verdict:
        """Verdict from the code/docs byte counts computed at extraction."""
        code = int(record.extra.get("code_bytes", 0))
        share = float(record.extra.get("code_share", 0.0))
        if code == 0:
            return Verdict.drop("docs_only", "no code in the target languages")
        if share < self.min_share:
            return Verdict.drop("docs_only", f"code share {share:.3f} < {self.min_share:g}")
        return Verdict.ok()
