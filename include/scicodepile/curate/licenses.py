"""Repository licenses as SPDX ids: from the source's metadata, else from the LICENSE file.

The policy setting (``SCICODEPILE_CURATE_LICENSE_POLICY``) says which are kept: ``permissive``
(default), ``permissive+copyleft`` or ``any``.  A repository without a detectable license is
excluded (``no_license``) and counted.
"""

from __future__ import annotations

import re
from pathlib import Path

PERMISSIVE = frozenset(
    {
        "MIT",
        "MIT-0",
        "BSD-2-Clause",
        "BSD-3-Clause",
        "BSD-3-Clause-Clear",
        "0BSD",
        "Apache-2.0",
        "ISC",
        "Zlib",
        "Unlicense",
        "CC0-1.0",
        "PSF-2.0",
        "BSL-1.0",
        "NCSA",
        "Python-2.0",
        "UPL-1.0",
        "X11",
        "CC-BY-4.0",
        "AFL-3.0",
        "WTFPL",
    }
)
COPYLEFT = frozenset(
    {
        "GPL-2.0-only",
        "GPL-2.0-or-later",
        "GPL-3.0-only",
        "GPL-3.0-or-later",
        "LGPL-2.1-only",
        "LGPL-2.1-or-later",
        "LGPL-3.0-only",
        "LGPL-3.0-or-later",
        "AGPL-3.0-only",
        "AGPL-3.0-or-later",
        "MPL-2.0",
        "EPL-1.0",
        "EPL-2.0",
        "CECILL-2.1",
        "EUPL-1.2",
    }
)

# metadata spellings -> SPDX (lower-cased, punctuation-squashed keys)
_ALIASES = {
    "mit": "MIT",
    "mitlicense": "MIT",
    "expat": "MIT",
    "mit0": "MIT-0",
    "bsd": "BSD-3-Clause",
    "bsdlicense": "BSD-3-Clause",
    "newbsd": "BSD-3-Clause",
    "bsd3": "BSD-3-Clause",
    "bsd3clause": "BSD-3-Clause",
    "3clausebsd": "BSD-3-Clause",
    "modifiedbsd": "BSD-3-Clause",
    "revisedbsd": "BSD-3-Clause",
    "bsd3clauselicense": "BSD-3-Clause",
    "newbsdlicense": "BSD-3-Clause",
    "bsd2": "BSD-2-Clause",
    "bsd2clause": "BSD-2-Clause",
    "simplifiedbsd": "BSD-2-Clause",
    "freebsd": "BSD-2-Clause",
    "0bsd": "0BSD",
    "apache": "Apache-2.0",
    "apache2": "Apache-2.0",
    "apache20": "Apache-2.0",
    "apachelicense20": "Apache-2.0",
    "apachesoftwarelicense": "Apache-2.0",
    "apachelicenseversion20": "Apache-2.0",
    "asl20": "Apache-2.0",
    "isc": "ISC",
    "isclicense": "ISC",
    "zlib": "Zlib",
    "unlicense": "Unlicense",
    "theunlicense": "Unlicense",
    "cc0": "CC0-1.0",
    "cc010": "CC0-1.0",
    "publicdomain": "CC0-1.0",
    "psf": "PSF-2.0",
    "psf20": "PSF-2.0",
    "pythonsoftwarefoundationlicense": "PSF-2.0",
    "boost": "BSL-1.0",
    "bsl10": "BSL-1.0",
    "gpl": "GPL-3.0-or-later",
    "gpl2": "GPL-2.0-only",
    "gplv2": "GPL-2.0-only",
    "gpl3": "GPL-3.0-only",
    "gplv3": "GPL-3.0-only",
    "gpl30": "GPL-3.0-only",
    "gpl20": "GPL-2.0-only",
    "gplv3+": "GPL-3.0-or-later",
    "gplv2+": "GPL-2.0-or-later",
    "lgpl": "LGPL-3.0-or-later",
    "lgplv3": "LGPL-3.0-only",
    "lgpl21": "LGPL-2.1-only",
    "lgplv21": "LGPL-2.1-only",
    "lgplv2+": "LGPL-2.1-or-later",
    "lgplv3+": "LGPL-3.0-or-later",
    "agpl": "AGPL-3.0-only",
    "agplv3": "AGPL-3.0-only",
    "mpl20": "MPL-2.0",
    "mpl2": "MPL-2.0",
    "mozillapubliclicense20": "MPL-2.0",
    "epl20": "EPL-2.0",
}
_KNOWN = {s.lower(): s for s in PERMISSIVE | COPYLEFT}

# LICENSE-file fingerprints: (phrase regex, SPDX), first match wins (more specific first)
_TEXT_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"GNU AFFERO GENERAL PUBLIC LICENSE", re.I), "AGPL-3.0-only"),
    (re.compile(r"GNU LESSER GENERAL PUBLIC LICENSE\s+Version 3", re.I), "LGPL-3.0-only"),
    (re.compile(r"GNU LESSER GENERAL PUBLIC LICENSE|GNU LIBRARY GENERAL PUBLIC", re.I), "LGPL-2.1-only"),
    (re.compile(r"GNU GENERAL PUBLIC LICENSE\s+Version 3", re.I), "GPL-3.0-only"),
    (re.compile(r"GNU GENERAL PUBLIC LICENSE\s+Version 2", re.I), "GPL-2.0-only"),
    (re.compile(r"Mozilla Public License,?\s+(?:Version|v\.?)\s*2\.0", re.I), "MPL-2.0"),
    (re.compile(r"Apache License,?\s+Version 2\.0", re.I), "Apache-2.0"),
    (re.compile(r"Boost Software License", re.I), "BSL-1.0"),
    (
        re.compile(r"This is free and unencumbered software released into the public domain", re.I),
        "Unlicense",
    ),
    (re.compile(r"CC0 1\.0 Universal|Creative Commons Zero", re.I), "CC0-1.0"),
    (re.compile(r"Permission is hereby granted, free of charge, to any person obtaining", re.I), "MIT"),
    (
        re.compile(
            r"Permission to use, copy, modify, and(?:/or)? distribute this software for any "
            r"purpose",
            re.I,
        ),
        "ISC",
    ),
    (
        re.compile(
            r"Neither the name of .{0,200}? nor the names of (?:its|the|any) contributors", re.I | re.S
        ),
        "BSD-3-Clause",
    ),
    (re.compile(r"Redistribution and use in source and binary forms", re.I), "BSD-2-Clause"),
    (re.compile(r"PYTHON SOFTWARE FOUNDATION LICENSE", re.I), "PSF-2.0"),
    (re.compile(r"This software is provided 'as-is', without any express or implied", re.I), "Zlib"),
]
LICENSE_FILE_NAMES = (
    "license",
    "licence",
    "copying",
    "license.txt",
    "license.md",
    "licence.txt",
    "licence.md",
    "copying.txt",
    "license.rst",
    "copying.md",
    "unlicense",
)


def normalise_spdx(value: str | None) -> str | None:
    """Turn a metadata license string (``"BSD License"``, ``"mit"``, ``"Apache 2.0"``) into SPDX.

    ``NOASSERTION``/``other``/unknown strings give None: an honest "unknown", never a guess.
    """
    if not value:
        return None
    raw = value.strip()
    if raw.lower() in _KNOWN:
        return _KNOWN[raw.lower()]
    if re.search(r"\s+or\s+", raw, flags=re.I):  # dual licensed: the first permissive option
        for part in re.split(r"\s+or\s+", raw, flags=re.I):
            spdx = normalise_spdx(part.strip(" ()"))
            if spdx in PERMISSIVE:
                return spdx
    squashed = re.sub(r"[\s_\-.,()'\"]", "", raw.lower())
    if squashed in _ALIASES:
        return _ALIASES[squashed]
    key = re.sub(r"licen[cs]e[d]?|version|software|\(.*?\)", "", raw.lower())
    key = re.sub(r"[\s_\-.,()'\"]|v(?=\d)", "", key)
    return _ALIASES.get(key)


def detect_license_text(text: str) -> str | None:
    """SPDX id of a LICENSE file's text by well-known phrases, or None."""
    head = text[:20_000]
    for pattern, spdx in _TEXT_RULES:
        if pattern.search(head):
            return spdx
    return None


def find_license_file(root: Path, files: list[str]) -> str | None:
    """The top-level LICENSE/COPYING file of a tree, if any (relative path)."""
    top = {f.lower(): f for f in files if "/" not in f}
    for name in LICENSE_FILE_NAMES:
        if name in top:
            return top[name]
    for lower, original in sorted(top.items()):
        if lower.startswith(("license", "licence", "copying")):
            return original
    return None


def resolve_license(metadata: str | None, root: Path | None, files: list[str]) -> tuple[str | None, str]:
    """(SPDX id or None, where it came from: ``metadata`` | ``license_file:<path>`` | ``none``)."""
    spdx = normalise_spdx(metadata)
    if spdx:
        return spdx, "metadata"
    if root is not None:
        name = find_license_file(root, files)
        if name:
            text = (root / name).read_bytes()[:40_000].decode("utf-8", "replace")
            spdx = detect_license_text(text)
            if spdx:
                return spdx, f"license_file:{name}"
    return None, "none"


def is_permissive(spdx: str | None) -> bool:
    """Whether the SPDX id is in the permissive set (used by the dedup keep rule too)."""
    return spdx in PERMISSIVE


def license_allowed(spdx: str | None, policy: str) -> tuple[bool, str | None]:
    """(allowed, rejection reason) under ``policy``."""
    if spdx is None:
        return False, "no_license"
    if policy == "any":
        return True, None
    if spdx in PERMISSIVE:
        return True, None
    if policy == "permissive+copyleft" and spdx in COPYLEFT:
        return True, None
    return False, "license_not_permitted"
