"""Tiny local repositories generated for the end-to-end tests (the "local" source: offline, fast).

Each repository gets its own random scientific-looking code, so near-dedup keeps them apart; one is
GPL (rejected by the licence policy) and one is a recipe collection (rejected as not scientific or
docs-only), so the run has rejections to account for.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

MIT = "MIT License\n\nPermission is hereby granted, free of charge, to any person obtaining a copy\n"
GPL = "GNU GENERAL PUBLIC LICENSE\n                       Version 3, 29 June 2007\n"
WORDS = (
    "flux density kernel energy phase lattice spectrum orbit plasma tensor gradient field "
    "solver mesh velocity pressure entropy vortex photon neutron enzyme protein genome cell "
    "diffusion reaction galaxy redshift magnitude decay sample noise filter wave"
).split()
DOMAINS = [
    ("physics", "plasma simulation"),
    ("astronomy", "galaxy photometry"),
    ("biology", "genome assembly"),
]


def _module(rng: random.Random, n_functions: int) -> str:
    lines = ['"""Numerical routines."""', "", "import math", ""]
    for _ in range(n_functions):
        name = "_".join(rng.sample(WORDS, 3))
        args = rng.sample(WORDS, 2)
        lines += [
            "",
            f"def {name}({args[0]}, {args[1]}):",
            f'    """Compute the {name.replace("_", " ")}."""',
        ]
        for _ in range(rng.randint(4, 9)):
            a, b = rng.sample(WORDS, 2)
            op = rng.choice(["+", "-", "*", "/"])
            fn = rng.choice(["sin", "cos", "exp", "sqrt"])
            scale, shift = f"{rng.uniform(0.1, 9.9):.4f}", rng.randint(1, 99)
            lines.append(f"    {a}_{b} = {args[0]} {op} {scale} * math.{fn}(abs({args[1]}) + {shift})")
        lines.append(f"    return {a}_{b}")
    return "\n".join(lines) + "\n"


def make_repositories(root: Path, count: int, *, seed: int = 0, files: int = 3, functions: int = 6) -> dict:
    """Write ``count`` kept-looking repositories plus one GPL and one recipe repository under ``root``."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(count):
        name = f"sci{seed}-{i:03d}"
        domain, topic = DOMAINS[i % len(DOMAINS)]
        folder = root / name
        (folder / "src").mkdir(parents=True)
        (folder / "README.md").write_text(
            f"# {name}\n\nA {domain} library implementing numerical solvers for {topic}, with simulation "
            f"and analysis tools.\n\n## Usage\n\n```python\nimport {name.replace('-', '_')}\n```\n"
        )
        (folder / "LICENSE").write_text(MIT)
        for j in range(files):
            (folder / "src" / f"mod{j}.py").write_text(_module(rng, functions))
        (root / f"{name}.metadata.json").write_text(
            json.dumps({"stars": 20 + i, "license": "MIT", "domain": domain})
        )
        names.append(name)
    gpl = root / f"gpl{seed}"
    gpl.mkdir()
    (gpl / "README.md").write_text(
        "# gpl\n\nA physics library implementing numerical solvers for plasma simulation.\n"
    )
    (gpl / "COPYING").write_text(GPL)
    (gpl / "sim.py").write_text(_module(rng, 2))
    (root / f"gpl{seed}.metadata.json").write_text(json.dumps({"stars": 50}))
    cakes = root / f"cakes{seed}"
    cakes.mkdir()
    (cakes / "README.md").write_text("# Cakes\n\nMy favourite cake recipes and photos.\n")
    (cakes / "LICENSE").write_text(MIT)
    (cakes / "bake.py").write_text("print('cake')\n")
    (root / f"cakes{seed}.metadata.json").write_text(json.dumps({"stars": 500, "license": "MIT"}))
    return {"kept_like": names, "gpl": f"gpl{seed}", "cakes": f"cakes{seed}"}
