"""Print the state of the latest run of a DAG (used by `make demo` to check `dags test`)."""

from __future__ import annotations

import json
import subprocess
import sys


def last_run_state(dag_id: str) -> str:
    out = subprocess.run(
        ["airflow", "dags", "list-runs", dag_id, "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    runs: list[dict] = []
    for line in out.splitlines():  # the CLI may print log lines before the JSON document
        if line.startswith(("[{", "[]")):
            runs = json.loads(line)
            break
    if not runs:
        return "none"
    runs.sort(key=lambda r: r.get("start_date") or r.get("logical_date") or "", reverse=True)
    return str(runs[0].get("state"))


if __name__ == "__main__":
    print(last_run_state(sys.argv[1]))
