"""Secret and PII redaction in kept code: keys, tokens, private keys, email addresses.

Matches are replaced by typed placeholders (``<API_KEY>``, ``<EMAIL>`` ...), as BigCode's PII
redaction does, so downstream models never see the secret and the code stays parseable.  Counts per
kind are returned so the stage report shows what was redacted.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable
from functools import lru_cache
from itertools import accumulate

_PATTERNS: list[tuple[str, tuple[str, ...], re.Pattern[str], str]] = [
    # (kind, literal triggers (a cheap "in" test before the regex runs), pattern, placeholder)
    (
        "private_key",
        ("PRIVATE KEY",),
        # PEM, OpenSSH and PGP ("... PRIVATE KEY BLOCK") blocks; a block cut before its END line
        # (a truncated paste) loses its key material up to the first character base64 never holds
        re.compile(
            r"-----BEGIN (?:[A-Z0-9 ]+ )?PRIVATE KEY(?: BLOCK)?-----"
            r"(?:[\s\S]{0,10000}?-----END (?:[A-Z0-9 ]+ )?PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s]*)"
        ),
        "<PRIVATE_KEY>",
    ),
    (
        "url_password",
        ("://",),
        # scheme://user:password@host -- the password only; user and host stay
        re.compile(r"(?<=://)(?P<user>[^\s:/@'\"`]{1,128}):(?P<pw>[^\s@/'\"`]{1,256})(?=@)"),
        r"\g<user>:<PASSWORD>",
    ),
    (
        "slack_webhook",
        ("hooks.slack.com",),
        re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9_/]{20,200}"),
        "<SLACK_WEBHOOK>",
    ),
    ("aws_access_key", ("AKIA", "ASIA"), re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "<AWS_ACCESS_KEY>"),
    (
        "github_token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b"),
        "<GITHUB_TOKEN>",
    ),
    ("slack_token", ("xox",), re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,200}\b"), "<SLACK_TOKEN>"),
    ("google_api_key", ("AIza",), re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"), "<GOOGLE_API_KEY>"),
    ("openai_key", ("sk-",), re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9_\-]{20,200}\b"), "<API_KEY>"),
    ("hf_token", ("hf_",), re.compile(r"\bhf_[A-Za-z0-9]{30,60}\b"), "<HF_TOKEN>"),
    (
        "jwt",
        ("eyJ",),
        re.compile(r"\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\b"),
        "<JWT>",
    ),
]
_SECRET_WORDS = ("key", "token", "password", "passwd", "secret")
_EMAIL_HINT = re.compile(r"@[A-Za-z0-9\-]+\.[A-Za-z]{2,}")
# key = "value" assignments whose name says secret; the value is replaced, the name kept
_ASSIGNMENT = re.compile(
    r"""(?P<name>(?:api[_\-]?key|secret[_\-]?(?:access[_\-]?)?key|(?:api|access|auth|bearer|refresh|secret)"""
    r"""[_\-]?token|password|passwd|client[_\-]?secret|secret)\b["']?\s*(?:[:=]|<-)\s*)"""
    r"""(?P<q>["'])(?P<value>[^"'\s]{8,200})(?P=q)""",
    re.IGNORECASE,
)
_EMAIL = re.compile(
    r"\b[A-Za-z0-9._%+\-]{1,64}@[A-Za-z0-9\-]{1,63}(?:\.[A-Za-z0-9\-]{1,63})*\.[A-Za-z]{2,24}\b"
)
_EMAIL_KEEP = re.compile(r"@(?:example\.(?:com|org|net)|localhost)$", re.I)
_PLACEHOLDER_VALUES = re.compile(
    r"^(?:x+|\*+|<[^>]*>|\$\{?\w+\}?|your[_\-]?\w*|changeme|none|null|"
    r"placeholder|dummy|test\w*|example\w*|\{\w*\}|%\(?\w*\)?s)$",
    re.I,
)


def redact(text: str) -> tuple[str, Counter[str]]:
    """Return ``text`` with secrets and email addresses replaced, and counts by kind."""
    counts: Counter[str] = Counter()
    for kind, triggers, pattern, placeholder in _PATTERNS:
        if any(t in text for t in triggers):
            text, n = pattern.subn(placeholder, text)
            if n:
                counts[kind] += n

    def _assignment(m: re.Match[str]) -> str:
        value = m.group("value")
        if _PLACEHOLDER_VALUES.match(value) or value.startswith("<"):
            return m.group(0)
        counts["secret_assignment"] += 1
        return f"{m.group('name')}{m.group('q')}<SECRET>{m.group('q')}"

    text = _by_line(text, _SECRET_WORDS, lambda line: _ASSIGNMENT.sub(_assignment, line), lower=True)

    def _email(m: re.Match[str]) -> str:
        if _EMAIL_KEEP.search(m.group(0)):
            return m.group(0)
        counts["email"] += 1
        return "<EMAIL>"

    if _EMAIL_HINT.search(text):
        text = _by_line(
            text, ("@",), lambda line: _EMAIL.sub(_email, line) if _EMAIL_HINT.search(line) else line
        )
    return text, counts


def _by_line(text: str, words: tuple[str, ...], apply: Callable[[str], str], *, lower: bool = False) -> str:
    """Run ``apply`` only on the lines holding one of ``words``: the regexes are costly, the lines few.

    The lines are found with one C-level scan for all the words over the whole text, not a Python
    loop per line.  (Secrets and addresses written across lines are not matched; the regexes never
    spanned lines.)
    """
    haystack = text.lower() if lower else text
    finder = _word_finder(words)
    hits = [m.start() for m in finder.finditer(haystack)]
    if not hits:
        return text
    lines = text.split("\n")
    if len(haystack) != len(text):  # lower-casing changed lengths (rare letters): match line by line
        targets = [i for i, line in enumerate(lines) if finder.search(line.lower() if lower else line)]
    else:
        starts = list(accumulate((len(line) + 1 for line in lines[:-1]), initial=0))
        targets = sorted({bisect_right(starts, pos) - 1 for pos in hits})
    for i in targets:
        lines[i] = apply(lines[i])
    return "\n".join(lines)


@lru_cache(maxsize=16)
def _word_finder(words: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)))
