#!/usr/bin/env bash
# Create bench/.venv-datatrove: the peer of bench/dedup.py (HuggingFace datatrove's MinHash pipeline)
# in a venv of its own, so its dependencies never touch the project's.  Idempotent: a stamp file
# records the pinned set; rerunning with the same pins does nothing.  bench/dedup.py calls this when
# the venv is missing, so `make bench` works on a fresh clone.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/bench/.venv-datatrove"
pins=("datatrove[processing,io]==0.10.1" "orjson==3.13.0" "spacy==3.8.18")
stamp="$venv/.installed"
want="${pins[*]}"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    exit 0
fi
python="${PYTHON:-$(command -v python3.11 || command -v python3)}"
echo "bench-datatrove-env: creating $venv with: $want" >&2
test -x "$venv/bin/python" || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "${pins[@]}"
"$venv/bin/python" -c "import datatrove.pipeline.dedup.minhash"
printf '%s' "$want" > "$stamp"
