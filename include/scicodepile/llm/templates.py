"""Prompt templates: versioned Jinja2 files under ``scicodepile/llm/prompts/``.

A template ``<name>.j2`` starts with a version comment on line 1 (``{# version: 3 #}``); the version
goes into every result and into the cache key, so editing a prompt without bumping it is visible in
review and bumping it invalidates exactly that prompt's cache.  Rendering uses ``StrictUndefined``: a
missing variable is an error, never an empty string.

Untrusted text (READMEs, code) is inserted with ``{{ text | untrusted("README") }}``.  The filter wraps
it in markers carrying a tag derived from the text itself (a sha256 prefix of label and content).  Text
cannot forge its own closing marker, because that would need the marker's tag to be a hash of a text
containing it.  Deterministic tags (not random ones) keep the rendered prompt, hence the cache key,
stable across reruns.  Templates must tell the model that text between such markers is data.
Chat-template control tokens inside the text (``<|im_start|>``, ``<|eot_id|>``, ``[INST]``,
``<<SYS>>``) are broken apart (``< |im_start|>``) so a tokenizer reads them as text, not as a turn of
the conversation.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from scicodepile.errors import ConfigError

PROMPTS_DIR = Path(__file__).parent / "prompts"
"""Where template files live."""

_VERSION_RE = re.compile(r"^\{#\s*version:\s*([A-Za-z0-9._-]+)\s*#\}\s*$")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_]*$")


class PromptError(ConfigError):
    """A template is missing, has no version line, or cannot be rendered with the given variables."""


_CHAT_TOKEN = re.compile(r"<\|[^|<>\n]{1,40}\|>|\[/?INST\]|<</?SYS>>")


def defuse_chat_tokens(text: str) -> str:
    """Break chat-template control tokens apart so they reach the model as plain text."""
    return _CHAT_TOKEN.sub(lambda m: m.group(0)[0] + " " + m.group(0)[1:], text)


def untrusted(text: object, label: str = "DATA") -> str:
    """Wrap untrusted ``text`` in delimiters it cannot spoof (see the module docstring)."""
    body = defuse_chat_tokens("" if text is None else str(text))
    label = re.sub(r"[^A-Z0-9_]", "_", str(label).upper())[:32] or "DATA"
    tag = hashlib.sha256(f"{label}\x00{body}".encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"<<<BEGIN UNTRUSTED {label} {tag}>>>\n{body}\n<<<END UNTRUSTED {label} {tag}>>>"


@dataclass(frozen=True)
class PromptTemplate:
    """One loaded template: its name, version, source and compiled form."""

    name: str
    version: str
    source: str
    path: Path

    @property
    def prompt_version(self) -> str:
        """``<name>@<version>``: recorded with every result, part of the cache key."""
        return f"{self.name}@{self.version}"

    def render(self, variables: dict[str, Any]) -> str:
        """Render with ``variables``; a missing variable raises :class:`PromptError`."""
        try:
            return _compiled(self.path, self.source).render(**variables).strip() + "\n"
        except jinja2.UndefinedError as exc:
            raise PromptError(f"prompt {self.name!r}: {exc.message}") from None


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # noqa: S701 - prompts are plain text for a model, never HTML
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["untrusted"] = untrusted
    return env


_ENV = _environment()


@functools.lru_cache(maxsize=256)
def _compiled(path: Path, source: str) -> jinja2.Template:
    return _ENV.from_string(source)


def load_prompt(name: str, directory: Path | None = None) -> PromptTemplate:
    """Load ``<directory>/<name>.j2`` (default: the library's prompts folder) and read its version."""
    if not _NAME_RE.match(name):
        raise PromptError(f"invalid prompt name {name!r} (lower-case letters, digits, underscores)")
    path = (directory or PROMPTS_DIR) / f"{name}.j2"
    try:
        source = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PromptError(f"no prompt template {path}") from None
    first = source.split("\n", 1)[0]
    match = _VERSION_RE.match(first)
    if not match:
        raise PromptError(f"prompt {path} must start with a version line like '{{# version: 1 #}}'")
    try:
        _compiled(path, source)
    except jinja2.TemplateSyntaxError as exc:
        raise PromptError(f"prompt {path} line {exc.lineno}: {exc.message}") from None
    return PromptTemplate(name=name, version=match.group(1), source=source, path=path)
