"""``scicodepile sandbox run FILE.py [--timeout S] [--json]``: run one program, print its outcome.

Bad input (missing file, not UTF-8, not Python, a timeout of 0 or less) is refused before anything runs.
Exit status: 0 when the program passed, 3 for any other outcome (fail, error, timeout, killed); the
usual 1 (bad input) and 2 (configuration) otherwise.  With ``--json`` the last line is the outcome as
one JSON object.
"""

from __future__ import annotations

import argparse
import json

from scicodepile.sandbox.base import load_program, open_sandbox, validate_timeout
from scicodepile.settings import load_settings

EXIT_NOT_PASSED = 3


def main(args: argparse.Namespace) -> int:
    """Validate the input, run it in the configured sandbox, print the outcome."""
    timeout = validate_timeout(args.timeout)  # before reading anything: nothing runs on a bad value
    program = load_program(args.file)
    settings = load_settings()
    sandbox = open_sandbox(settings)
    result = sandbox.run(program, timeout=timeout)
    label = result.outcome.value + (f" ({result.kill_reason.value})" if result.kill_reason else "")
    peak = f"{result.peak_memory_bytes / 2**20:.1f} MiB" if result.peak_memory_bytes else "n/a"
    print(f"outcome: {label}")
    print(f"exit code: {result.exit_code}  duration: {result.duration_s:.3f} s  peak memory: {peak}")
    if result.message:
        print(f"message: {result.message}")
    tail = result.output_tail.rstrip()
    if tail and not args.json:
        print("output tail:")
        print("\n".join("  " + line for line in tail.splitlines()[-20:]))
    if args.json:
        print(json.dumps(result.to_dict()))
    return 0 if result.passed else EXIT_NOT_PASSED
