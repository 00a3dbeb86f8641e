"""``scicodepile``: run stages without Airflow, on the same library code the DAGs call.

Configuration faults print one line (``error: ... (check SCICODEPILE_X)``) and exit 2; there is no
traceback wall for a wrong URL or a missing bucket.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from scicodepile.errors import ConfigError, SciCodePileError
from scicodepile.pipeline import STAGES, format_details
from scicodepile.runner import SOURCES

log = logging.getLogger("scicodepile")


def _setup_logging(level: str, quiet: bool) -> None:
    logging.basicConfig(
        level=logging.WARNING if quiet else getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    # Connection retries are ours to report, once, as a clear error: not one warning per retry.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    logging.getLogger("great_expectations").setLevel(logging.WARNING)


def _settings_for(args: argparse.Namespace):
    from scicodepile.settings import load_settings

    overrides: dict[str, object] = {}
    if getattr(args, "out", None):
        overrides["var_dir"] = Path(args.out).resolve()
    return load_settings(**overrides)


# ----------------------------------------------------------------------------------- commands
def cmd_run(args: argparse.Namespace) -> int:
    from scicodepile.db import check_connection, migrate
    from scicodepile.runner import RunContext, run_until
    from scicodepile.store import open_store

    settings = _settings_for(args)
    check_connection(settings)
    migrate(settings)
    store = open_store(settings)
    ctx = RunContext(
        settings=settings,
        source=args.source,
        path=Path(args.path).resolve() if args.path else None,
        manifest=Path(args.manifest).resolve() if args.manifest else None,
        limit=args.limit,
        run=args.run,
        num_shards=args.shards,
    )
    reports = run_until(ctx, args.until)
    summary = {"stages": {name: report.to_dict() for name, report in reports.items()}}
    print(f"SciCodePile run ({args.source} source) finished:")
    for name, report in reports.items():
        rejected = ", ".join(f"{k}={v}" for k, v in sorted(report.rejected.items())) or "none"
        print(f"  {name:<10} kept {report.kept:>7}  rejected: {rejected}  ({report.seconds:.1f}s)")
        for line in format_details(report.details, indent="             "):
            print(line)
        for key in report.outputs[:5]:
            print(f"             -> {store.location(key)}")
        if len(report.outputs) > 5:
            print(f"             ... and {len(report.outputs) - 5} more outputs")
    if args.json:
        print(json.dumps(summary, default=str))
    return 0


def cmd_db(args: argparse.Namespace) -> int:
    from scicodepile.db import migrate

    settings = _settings_for(args)
    if args.action == "upgrade":
        migrate(settings, args.revision or "head")
    else:
        migrate(settings, args.revision or "base", down=True)
    print(
        f"database {args.action} to {args.revision or ('head' if args.action == 'upgrade' else 'base')}: done"
    )
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from scicodepile.db import check_connection
    from scicodepile.store import open_store

    settings = _settings_for(args)
    check_connection(settings)
    store = open_store(settings)
    print(f"database ok: {settings.public_dict()['database_url']}")
    print(f"object store ok: {store!r} ({store.name})")
    return 0


def cmd_sandbox(args: argparse.Namespace) -> int:
    try:
        from scicodepile.sandbox.cli import main as sandbox_main
    except ModuleNotFoundError:
        raise SciCodePileError("the sandbox is not available in this build yet") from None
    return sandbox_main(args)


# ------------------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scicodepile", description=__doc__.splitlines()[0])
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and the summary")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the pipeline's stages up to --until")
    run.add_argument("--source", choices=SOURCES, default="sample")
    run.add_argument("--path", help="folder of repositories (local source)")
    run.add_argument("--manifest", help="package manifest file (sample source)")
    run.add_argument("--until", choices=STAGES, default="curate")
    run.add_argument("--out", help="working folder (SQLite database and local object store)")
    run.add_argument("--limit", type=int, default=None, help="at most this many repositories")
    run.add_argument("--shards", type=int, default=1, help="partitions per stage")
    run.add_argument(
        "--run",
        default="default",
        help="run key: completion markers and per-run outputs (F1 run=<key>/ partitions) are keyed by it",
    )
    run.add_argument("--json", action="store_true", help="last line: one JSON summary object")
    run.set_defaults(func=cmd_run)

    db = sub.add_parser("db", help="migrate the application database")
    db.add_argument("action", choices=["upgrade", "downgrade"])
    db.add_argument("revision", nargs="?")
    db.add_argument("--out", help="working folder (SQLite database)")
    db.set_defaults(func=cmd_db)

    check = sub.add_parser("check", help="check that the database and object store are usable")
    check.add_argument("--out", help="working folder")
    check.set_defaults(func=cmd_check)

    sandbox = sub.add_parser("sandbox", help="run untrusted code in the sandbox")
    sandbox_sub = sandbox.add_subparsers(dest="sandbox_command", required=True)
    sandbox_run = sandbox_sub.add_parser("run", help="run one Python program and print its outcome")
    sandbox_run.add_argument("file")
    sandbox_run.add_argument("--timeout", type=float, default=10.0)
    sandbox_run.add_argument("--json", action="store_true")
    sandbox.set_defaults(func=cmd_sandbox)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.log_level, args.quiet)
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SciCodePileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
