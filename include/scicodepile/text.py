"""Making untrusted strings storable: no NUL bytes, no lone surrogates, bounded length.

Postgres ``text`` cannot hold ``\\x00`` and psycopg cannot encode a lone surrogate (``"\\ud800"`` is
valid JSON), so one such character in a repository description, a PKG-INFO field, a file name or an
LLM answer would fail the whole transaction it is written in.  Sources and the LLM layer pass every
external string through :func:`clean_text` before it reaches the database.
"""

from __future__ import annotations

import re

_BAD = re.compile(r"[\x00\ud800-\udfff]")


def clean_text(value: str, limit: int | None = None) -> str:
    """``value`` with NUL bytes and lone surrogates replaced by U+FFFD, cut to ``limit`` characters."""
    out = _BAD.sub("\ufffd", value)
    return out if limit is None else out[:limit]


def clean_opt(value: object, limit: int | None = None) -> str | None:
    """:func:`clean_text` for an optional string (None stays None)."""
    return None if value is None else clean_text(str(value), limit)
