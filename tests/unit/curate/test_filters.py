"""Repository and file filters, licenses, opt-out and redaction."""

from __future__ import annotations

from pathlib import Path

import pytest

from scicodepile.curate.extract import ExtractedFile
from scicodepile.curate.filters.docs_only import DocsOnlyFilter, code_share
from scicodepile.curate.filters.files import FileFilterConfig, StackFileFilter
from scicodepile.curate.filters.license import LicenseFilter
from scicodepile.curate.filters.metadata import MetadataFilter, RepoView
from scicodepile.curate.licenses import detect_license_text, license_allowed, normalise_spdx
from scicodepile.curate.optout import load_optout
from scicodepile.curate.redact import redact
from scicodepile.errors import ConfigError


def test_metadata_filter_reasons_and_unknown_stars_flagged() -> None:
    f = MetadataFilter(min_stars=10)
    repos = [
        RepoView(1, "a/fork", stars=100, is_fork=True),
        RepoView(2, "a/old", stars=100, archived=True),
        RepoView(3, "a/empty", stars=100, size_kb=0),
        RepoView(4, "a/few", stars=9),
        RepoView(5, "a/ten", stars=10),
        RepoView(6, "a/unknown", stars=None),
    ]
    kept = list(f.run(repos))
    assert [r.full_name for r in kept] == ["a/ten", "a/unknown"]
    assert repos[5].flags == ["stars_unknown"]
    assert f.stats == {
        "dropped:fork": 1,
        "dropped:archived": 1,
        "dropped:empty": 1,
        "dropped:low_stars": 1,
        "kept": 2,
        "flag:stars_unknown": 1,
    }


def _file(text: str) -> ExtractedFile:
    return ExtractedFile(path="x.py", size=len(text), language="Python", text=text)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("x = 1\n" * 10, None),
        ("x = '" + "a" * 1200 + "'\n", "max_line_length"),
        (("y = '" + "b" * 150 + "'\n") * 5, "mean_line_length"),
        ("{}[]();,.\n" * 20, "alnum_fraction"),
        ("z = 1\n" * 400, "file_too_large"),
    ],
)
def test_stack_file_filter(text: str, reason: str | None) -> None:
    verdict = StackFileFilter(FileFilterConfig(max_bytes=2000)).filter(_file(text))
    assert verdict.reason == reason and verdict.keep == (reason is None)


def test_docs_only() -> None:
    langs = frozenset({"Python"})
    docs = [
        ExtractedFile("README.md", 5000),
        ExtractedFile("docs/a.rst", 5000),
        ExtractedFile("a.py", 100, "Python"),
    ]
    code, doc_bytes, share = code_share(docs, langs)
    assert (code, doc_bytes) == (100, 10_000) and share < 0.1
    view = RepoView(1, "a/b", extra={"code_bytes": code, "code_share": share})
    assert DocsOnlyFilter(0.1).filter(view).reason == "docs_only"
    assert DocsOnlyFilter(0.1).filter(RepoView(1, "a/b", extra={"code_bytes": 0})).reason == "docs_only"
    assert DocsOnlyFilter(0.1).filter(RepoView(1, "a/b", extra={"code_bytes": 9, "code_share": 0.5})).keep


MIT = "Permission is hereby granted, free of charge, to any person obtaining a copy of this software"
GPL3 = "GNU GENERAL PUBLIC LICENSE\n Version 3, 29 June 2007"


def test_license_resolution_and_policy(tmp_path: Path) -> None:
    assert normalise_spdx("BSD License") == "BSD-3-Clause" and normalise_spdx("NOASSERTION") is None
    assert detect_license_text(MIT) == "MIT" and detect_license_text(GPL3) == "GPL-3.0-only"
    assert license_allowed("GPL-3.0-only", "permissive") == (False, "license_not_permitted")
    assert license_allowed("GPL-3.0-only", "permissive+copyleft") == (True, None)
    assert license_allowed(None, "any") == (False, "no_license")
    (tmp_path / "LICENSE").write_text(MIT)
    view = RepoView(1, "a/b", license=None)
    assert LicenseFilter("permissive", tmp_path, ["LICENSE", "a.py"]).filter(view).keep
    assert view.license == "MIT" and view.extra["license_source"] == "license_file:LICENSE"
    (tmp_path / "COPYING").write_text(GPL3)
    gpl = RepoView(2, "a/c", license=None)
    assert LicenseFilter("permissive", tmp_path, ["COPYING"]).filter(gpl).reason == "license_not_permitted"
    none = RepoView(3, "a/d", license="other")
    assert LicenseFilter("permissive", tmp_path, ["a.py"]).filter(none).reason == "no_license"


def test_optout_list(tmp_path: Path) -> None:
    path = tmp_path / "optout.txt"
    path.write_text("# comment\nAlice/Secret-Repo\nbob\ncarol/*  # whole owner\n")
    opt = load_optout(path)
    assert opt.matches("alice/secret-repo") == "alice/secret-repo"
    assert opt.matches("alice/other") is None
    assert opt.matches("Bob/anything") == "bob/*" and opt.matches("carol/x") == "carol/*"
    with pytest.raises(ConfigError, match="SCICODEPILE_CURATE_OPTOUT_FILE"):
        load_optout(tmp_path / "missing.txt")


def test_redaction_of_keys_tokens_and_emails() -> None:
    text = (
        'AWS = "AKIAIOSFODNN7EXAMPLE"\n'
        "token = 'ghp_" + "a" * 36 + "'\n"
        'api_key = "s3cr3tvalue123456"\n'
        'password = "changeme"\n'
        "# contact: jane.doe@uni-example.de, docs@example.com\n"
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----\n"
    )
    out, counts = redact(text)
    assert "AKIAIOSFODNN7EXAMPLE" not in out and "ghp_" not in out and "s3cr3tvalue" not in out
    assert "jane.doe" not in out and "MIIEow" not in out
    assert 'password = "changeme"' in out and "docs@example.com" in out  # placeholders stay
    assert counts == {
        "aws_access_key": 1,
        "github_token": 1,
        "secret_assignment": 1,
        "email": 1,
        "private_key": 1,
    }


def test_alnum_fraction_ascii_fast_path_matches_unicode_rule() -> None:
    from scicodepile.curate.filters.files import alnum_fraction

    for text in ("a1 _;", "x = [1, 2]\n", "é1 ;", "日本語 ok"):
        assert alnum_fraction(text) == pytest.approx(sum(c.isalnum() for c in text) / len(text))
    out, counts = redact('MY_API_KEY = "abcdefgh12345678"\n@property\ndef f(): ...\n')
    assert 'MY_API_KEY = "<SECRET>"' in out and "@property" in out and counts == {"secret_assignment": 1}
