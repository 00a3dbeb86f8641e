"""The Stack / StarCoder style file filters over decoded code files.

Defaults follow StarCoder's data filtering: maximum line length 1000, mean line length 100,
alphanumeric fraction at least 0.25, a size cap; NUL bytes are caught earlier (extraction).
"""

from __future__ import annotations

from dataclasses import dataclass

from scicodepile.curate.extract import ExtractedFile
from scicodepile.pipeline import Filter, Verdict


@dataclass(frozen=True)
class FileFilterConfig:
    """Thresholds of :class:`StackFileFilter`."""

    max_line_length: int = 1000
    max_mean_line_length: float = 100.0
    min_alnum_fraction: float = 0.25
    max_bytes: int = 1_000_000

    @classmethod
    def from_settings(cls, settings: object) -> FileFilterConfig:
        """Thresholds from the ``curate_*`` settings."""
        return cls(
            max_line_length=settings.curate_max_line_length,  # type: ignore[attr-defined]
            max_mean_line_length=settings.curate_max_mean_line_length,  # type: ignore[attr-defined]
            min_alnum_fraction=settings.curate_min_alnum_fraction,  # type: ignore[attr-defined]
            max_bytes=settings.curate_max_file_bytes,  # type: ignore[attr-defined]
        )


def line_stats(text: str) -> tuple[int, float]:
    """(longest line, mean line length) in characters."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        return 0, 0.0
    lengths = [len(line) for line in lines]
    return max(lengths), sum(lengths) / len(lengths)


_ASCII_ALNUM = bytes(range(48, 58)) + bytes(range(65, 91)) + bytes(range(97, 123))


def alnum_fraction(text: str) -> float:
    """Share of alphanumeric characters (StarCoder's ``alphanum_fraction``, Unicode-aware)."""
    if not text:
        return 0.0
    if text.isascii():  # the common case, counted in C: bytes minus the non-alphanumeric ones
        data = text.encode("ascii")
        return (len(data) - len(data.translate(None, _ASCII_ALNUM))) / len(data)
    return sum(map(str.isalnum, text)) / len(text)


class StackFileFilter(Filter[ExtractedFile]):
    """Drops files with very long lines, a high mean line length (minified/data), little
    alphanumeric content, or over the size cap."""

    name = "stack_file_filter"

    def __init__(self, config: FileFilterConfig | None = None, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.config = config or FileFilterConfig()

    def filter(self, record: ExtractedFile) -> Verdict:
        """Verdict for one decoded file (files without text are not this filter's business)."""
        text = record.text or ""
        cfg = self.config
        size = len(text.encode("utf-8"))
        if size > cfg.max_bytes:
            return Verdict.drop("file_too_large", f"{size} bytes > {cfg.max_bytes}")
        longest, mean = line_stats(text)
        if longest > cfg.max_line_length:
            return Verdict.drop("max_line_length", f"a line of {longest} characters > {cfg.max_line_length}")
        if mean > cfg.max_mean_line_length:
            return Verdict.drop("mean_line_length", f"mean {mean:.1f} > {cfg.max_mean_line_length:g}")
        frac = alnum_fraction(text)
        if frac < cfg.min_alnum_fraction:
            return Verdict.drop("alnum_fraction", f"{frac:.3f} < {cfg.min_alnum_fraction:g}")
        return Verdict.ok()
