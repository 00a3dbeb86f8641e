#!/usr/bin/env bash
# Build the sandbox's interpreter environment: a venv from Debian's /usr/bin/python3 with the pinned
# scientific stack of include/data/sandbox-requirements.txt, in a world-readable folder outside /root and
# outside the project's data folders (the sandbox runs as an unprivileged host user, which cannot enter
# /root, and never sees var/).  The folder is named by the hash of the requirements file, so a changed pin
# builds a new environment beside the old one and scicodepile.sandbox finds it by the same hash.
# Idempotent: prints the venv's path and exits at once when it is already complete.
set -euo pipefail
cd "$(dirname "$0")/.."
REQ=include/data/sandbox-requirements.txt
ROOT_DIR=${SCICODEPILE_SANDBOX_ENV_ROOT:-/opt/scicodepile}
BASE_PY=${SCICODEPILE_SANDBOX_BASE_PYTHON:-/usr/bin/python3}
HASH=$(sha256sum "$REQ" | cut -c1-12)
TARGET="$ROOT_DIR/sandbox-venv-$HASH"
STAMP="$TARGET/.complete"

if [ ! -x "$BASE_PY" ]; then
  echo "sandbox-env: $BASE_PY is missing (install Debian's python3 and python3-venv)" >&2
  exit 1
fi
# The stamp records the base Python and this script's layout revision: a change of either rebuilds.
PYVER="$("$BASE_PY" -c 'import sys; print(sys.version.split()[0])') layout-2"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PYVER" ]; then
  echo "$TARGET"
  exit 0
fi
if ! "$BASE_PY" -c 'import ensurepip, venv' 2>/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  echo "sandbox-env: installing python3-venv" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi

umask 022
mkdir -p "$ROOT_DIR"
chmod 755 "$ROOT_DIR"
exec 9>"$ROOT_DIR/.build.lock"
flock 9
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PYVER" ]; then echo "$TARGET"; exit 0; fi

echo "sandbox-env: building $TARGET (Python $PYVER)" >&2
rm -rf "$TARGET"
trap 'rm -rf "$TARGET"' ERR
"$BASE_PY" -m venv "$TARGET"
# --no-deps: the requirements file is the whole closure, so nothing unpinned slips in; pip check proves it.
"$TARGET/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r "$REQ" >&2
"$TARGET/bin/python" -m pip check >&2
# The code under test gets no installer; setuptools' distutils-precedence.pth would also cost every run
# an import at start-up.
"$TARGET/bin/python" -m pip uninstall -q -y setuptools pip >&2
chmod -R a+rX,go-w "$TARGET"
# Prove the sandbox's user can use it: an unprivileged uid, no environment, the scientific stack imports.
if command -v setpriv >/dev/null && [ "$(id -u)" -eq 0 ]; then
  env -i PATH=/usr/bin:/bin setpriv --reuid=65534 --regid=65534 --clear-groups \
    "$TARGET/bin/python" -I -c 'import numpy, scipy, scipy.linalg, sympy, pandas' >&2
fi
echo "$PYVER" > "$STAMP"
chmod 644 "$STAMP"
trap - ERR
echo "$TARGET"
