"""The curate stage: repositories in, F1 Parquet shards out, incrementally.

Per shard of repositories (:func:`curate_shard`): opt-out list, metadata filter (stars, forks,
archived, empty), fetch at a pinned commit (stored once in the object store), safe extraction, code
extraction, license policy, README check (LLM or the labelled heuristic), docs-only filter, The Stack
file filters, secret redaction, exact hashes and MinHash signatures.  Kept file contents go to a
staging Parquet shard; every file gets a ``files`` row (kept, or its rejection reason) and every
rejection a ``rejections`` row.

Then once (:func:`dedup_corpus`): exact duplicates (same normalised sha256) and near duplicates
(MinHash LSH clusters), keeping one file per cluster by the stated rule (:func:`keep_rank`).  Then per
shard (:func:`publish_shard`): the F1 shard of newly kept files with its manifest, and
(:func:`gate_f1`) the great-expectations gate.

Incremental runs (why: a scheduled run must never lose what earlier runs published):

* A run curates only the repositories that are due: never curated under this F1 config, flagged
  ``needs_recurate`` by the crawl (``pushed_at`` changed), retrying a transient fetch failure, or
  curated by this same run (a rerun redoes its own work).  ``params["recurate_all"]`` makes every
  repository of the source due.  The opt-out list is applied to every kept repository on every run.
* F1 is append-only, one partition per run::

      f1/<slug>/run=<run>/part-NNNNN.parquet            rows newly kept by this run (never empty)
      f1/<slug>/run=<run>/part-NNNNN.manifest.json      its manifest
      f1/<slug>/run=<run>/part-NNNNN.superseded.json    tombstones: rows of EARLIER shards retracted

  The F1 dataset is the union of every ``*.parquet`` under ``f1/<slug>/`` minus the rows listed in
  the ``*.superseded.json`` tombstones (matched on shard key, repository, commit and path; see
  :mod:`scicodepile.curate.layout`: :func:`f1_shard_keys`, :func:`f1_tombstones`, :func:`read_f1`).
  ``datasets.load_dataset("parquet", data_files=f1_shard_keys(...) as locations)`` loads the union.
  A published shard is never rewritten by another run; rerunning the same run key rewrites the same
  keys with the same rows.
  ``files.shard_key`` names the shard holding each kept file.
* Dedup is global: a run's new files are compared with the files already published under this
  config (exact: their sha256 in the ``files`` table; near: their signature shards from earlier runs).
  Published files always win, so published data is never retracted by dedup; among new files the
  keep rule applies.  Each dropped file's rejection names the file it duplicates.
* A re-curated repository at a new commit supersedes its earlier files: those whose content is not
  in the new snapshot get ``kept=False``, reason ``superseded`` (``shard_key`` still names the shard
  they are in) and a tombstone; unchanged files stay published (their new copies are exact
  duplicates of them).  A previously kept repository rejected on re-curation (opt-out, license...)
  has its files withdrawn the same way (reason ``withdrawn``).

Every step is a partition with a completion marker; rows are upserted on natural keys.  Runs of one
config must not overlap (the DAG has ``max_active_runs=1``); publish re-checks exact duplicates
against other runs' shards, so even overlapping runs never put one sha256 twice into F1.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update

from scicodepile.curate.extract import ExtractedFile, extract_code, load_language_table, parse_languages
from scicodepile.curate.fetch import ArchiveRejected, ExtractionLimits, archive_kind, extract_archive
from scicodepile.curate.filters.docs_only import DocsOnlyFilter, code_share
from scicodepile.curate.filters.files import FileFilterConfig, StackFileFilter
from scicodepile.curate.filters.license import LicenseFilter
from scicodepile.curate.filters.metadata import MetadataFilter, RepoView
from scicodepile.curate.filters.readme import ReadmeFilter, check_readmes, find_readme, read_readme
from scicodepile.curate.layout import (  # noqa: F401 - re-exported: the F1 layout and readers
    CURATE_SETTINGS,
    _f1_schema,
    _iter_rows,
    _row_id,
    _run_prefix,
    _signature_key,
    _staging_key,
    _staging_schema,
    _tombstone_index,
    _tombstone_staging_key,
    f1_key,
    f1_prefix,
    f1_run_prefix,
    f1_shard_keys,
    f1_slug,
    f1_tombstones,
    minhash_config,
    read_f1,
    tombstone_key,
)
from scicodepile.curate.licenses import is_permissive, license_allowed, normalise_spdx
from scicodepile.curate.optout import load_optout
from scicodepile.curate.redact import redact
from scicodepile.db import record_rejection, session_scope, upsert
from scicodepile.db.models import Artifact, File, Rejection, Repository, Snapshot
from scicodepile.pipeline import Partition, Progress, StageReport, run_partition, shard_of
from scicodepile.store import open_store
from scicodepile.store.keys import manifest_key, safe_segment, snapshot_key

log = logging.getLogger("scicodepile")

STAGE = "curate"
DEDUP_REASONS = ("exact_duplicate", "near_duplicate")
TRANSIENT_REASONS = ("fetch_failed",)
"""Repository rejections retried next run, which leave an earlier decision (and F1) alone."""


def _published_elsewhere(ctx: Any) -> Any:
    """SQL condition: the file sits in an F1 shard of this config written by ANOTHER run."""
    return File.shard_key.like(_like(f1_prefix(ctx.settings)) + "%", escape="\\") & ~File.shard_key.like(
        _like(f1_run_prefix(ctx)) + "%", escape="\\"
    )


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _is_published_elsewhere(ctx: Any, shard: str | None) -> bool:
    return (
        bool(shard) and shard.startswith(f1_prefix(ctx.settings)) and not shard.startswith(f1_run_prefix(ctx))
    )


def _languages(settings: Any) -> frozenset[str]:
    return parse_languages(settings.curate_languages)


def _partition(ctx: Any, step: str, index: int = 0, count: int = 1) -> Partition:
    return Partition(f"{STAGE}-{step}", index, count, run=f"{ctx.run}-{f1_slug(ctx.settings)}")


# ------------------------------------------------------------------------------------- planning
def plan_curate(ctx: Any) -> list[dict[str, Any]]:
    """One ref per shard of repositories (``shard_of(repository id) mod num_shards``)."""
    n = max(1, int(ctx.num_shards))
    return [{"shard": i, "num_shards": n} for i in range(n)]


def _is_due(repo: Repository, ctx: Any, slug: str) -> bool:
    """Whether this run curates ``repo`` (see the module docstring)."""
    state = repo.stage_status or {}
    return (
        bool(ctx.params.get("recurate_all"))
        or repo.needs_recurate
        or state.get("curate_slug") != slug
        or state.get("curate_run") == ctx.run
    )


def _repositories(
    session: Any, ctx: Any, shard: int, num_shards: int
) -> tuple[list[Repository], list[Repository]]:
    """This shard's repositories of the source that the crawl did not reject (curate re-decides its
    own): ``(due for curation, kept earlier and not due)``; the second list only meets the opt-out."""
    slug = f1_slug(ctx.settings)
    stmt = select(Repository).where(Repository.source == ctx.source).order_by(Repository.id)
    due: list[Repository] = []
    settled: list[Repository] = []
    for r in session.scalars(stmt):
        if (r.status == "rejected" and r.rejection_stage != STAGE) or shard_of(r.id, num_shards) != shard:
            continue
        if _is_due(r, ctx, slug):
            due.append(r)
        elif r.status == "kept":
            settled.append(r)
    if ctx.limit:
        due = due[: ctx.limit]
    return due, settled


# ------------------------------------------------------------------------------- curate a shard
class _ShardWork:
    """The state of one curate partition: counters, staging rows, the LLM client."""

    def __init__(self, ctx: Any, index: int, count: int) -> None:
        self.ctx, self.settings, self.index, self.count = ctx, ctx.settings, index, count
        self.store = open_store(ctx.settings)
        self.languages = _languages(ctx.settings)
        self.table = load_language_table()
        self.limits = ExtractionLimits.from_settings(ctx.settings)
        self.file_filter = StackFileFilter(FileFilterConfig.from_settings(ctx.settings))
        self.optout = load_optout(ctx.settings.curate_optout_file)
        self.report = StageReport(STAGE)
        self.repo_rejected: Counter[str] = Counter()
        self.file_rejected: Counter[str] = Counter()
        self.member_rejected: Counter[str] = Counter()
        self.flags: Counter[str] = Counter()
        self.redactions: Counter[str] = Counter()
        self.readme_methods: Counter[str] = Counter()
        self.encodings: Counter[str] = Counter()
        self.lang_files: Counter[str] = Counter()
        self.lang_bytes: Counter[str] = Counter()
        self.repos_in = self.repos_kept = self.files_in = self.files_kept = 0
        self.staging: list[dict[str, Any]] = []
        self.slug = f1_slug(ctx.settings)
        self.already_published = 0
        self.retired: Counter[str] = Counter()
        self.tombstones: dict[int, dict[str, Any]] = {}
        self.llm = self._llm()

    def _llm(self) -> Any | None:
        try:
            from scicodepile.llm import get_llm, llm_configured
        except ImportError:
            return None
        return get_llm(self.settings) if llm_configured(self.settings) else None

    # -- rejections ----------------------------------------------------------------------------
    def reject_repo(self, repo: Repository, view: RepoView, reason: str, detail: str | None) -> None:
        """Record the rejection.  A transient failure (fetch) leaves an earlier decision and its
        published files alone and is retried next run; any other rejection withdraws the files this
        repository had kept (tombstones for those already in F1)."""
        transient = reason in TRANSIENT_REASONS
        self.repo_rejected[reason] += 1
        self.report.reject(f"repository:{reason}")
        with session_scope(self.settings) as s:
            row = s.get(Repository, repo.id)
            if not transient:
                self._retire(
                    s,
                    repo,
                    [],
                    "withdrawn",
                    f"repository rejected on re-curation ({reason})",
                    lambda *_: False,
                )
            if not (transient and row.status == "kept"):
                row.status = "rejected"
                row.rejection_stage = STAGE
                row.rejection_reason = reason[:128]
                row.stage_status = {**(row.stage_status or {}), STAGE: "rejected"}
            row.needs_recurate = transient
            row.stage_status = {
                **(row.stage_status or {}),
                "curate_slug": self.slug,
                "curate_run": self.ctx.run,
            }
            row.extra = {**(row.extra or {}), **_repo_extra(view)}
            record_rejection(s, STAGE, "repository", repo.full_name, reason, detail)

    def _retire(
        self,
        s: Any,
        repo: Repository,
        where: list[Any],
        reason: str,
        detail: str,
        spare: Any,
    ) -> None:
        """``kept=False`` with ``reason`` for the kept files of ``repo`` matching ``where`` (except
        those ``spare(sha256, shard_key)`` keeps).  A file in another run's F1 shard keeps its
        ``shard_key`` (the shard it is in) and gets a tombstone; one in this run's shard is unpublished
        (publish rewrites that shard)."""
        rows = s.execute(
            select(File.id, File.path, File.sha256, File.shard_key, Snapshot.commit)
            .join(Snapshot, Snapshot.id == File.snapshot_id)
            .where(File.repository_id == repo.id, File.kept.is_(True), *where)
        ).all()
        rows = [r for r in rows if not spare(r[2], r[3])]
        if not rows:
            return
        entries = []
        rejections = []
        for fid, path, sha, shard, commit in rows:
            published = _is_published_elsewhere(self.ctx, shard)
            if published:
                entries.append(
                    {
                        "shard_key": shard,
                        "repository": repo.full_name,
                        "commit": commit,
                        "path": path,
                        "sha256": sha,
                        "file_id": int(fid),
                        "reason": reason,
                        "detail": detail,
                    }
                )
            rejections.append(
                {
                    "stage": STAGE,
                    "subject_type": "file",
                    "subject_key": f"{repo.full_name}@{commit}:{path}"[:1024],
                    "reason": reason,
                    "detail": f"{detail}; was published in {shard}" if published else detail,
                }
            )
            self.retired[reason] += 1
            self.report.reject(f"file:{reason}")
        self._save_tombstones(entries)  # before the database commits: a crash leaves a superset
        ids = [int(r[0]) for r in rows]
        in_run = [int(r[0]) for r in rows if not _is_published_elsewhere(self.ctx, r[3])]
        s.execute(update(File).where(File.id.in_(ids)).values(kept=False, rejection_reason=reason))
        if in_run:
            s.execute(
                update(File)
                .where(
                    File.id.in_(in_run),
                    File.shard_key.like(_like(f1_run_prefix(self.ctx)) + "%", escape="\\"),
                )
                .values(shard_key=None)
            )
        upsert(
            s,
            Rejection,
            rejections,
            keys=["stage", "subject_type", "subject_key", "reason"],
            update=["detail"],
        )

    def _save_tombstones(self, entries: list[dict[str, Any]]) -> None:
        """Merge entries into this shard's tombstone staging list (keyed by file id: reruns add nothing)."""
        if not entries:
            return
        if not self.tombstones:
            key = _tombstone_staging_key(self.ctx, self.index)
            if self.store.exists(key):
                self.tombstones = {
                    int(e["file_id"]): e for e in json.loads(self.store.get_bytes(key))["entries"]
                }
        self.tombstones.update({int(e["file_id"]): e for e in entries})
        self._write_tombstones()

    def _write_tombstones(self) -> None:
        entries = sorted(self.tombstones.values(), key=lambda e: (e["shard_key"], e["file_id"]))
        self.store.put_bytes(
            _tombstone_staging_key(self.ctx, self.index),
            json.dumps({"entries": entries}, indent=1).encode(),
            "application/json",
        )

    # -- one repository ------------------------------------------------------------------------
    def curate_repository(self, repo: Repository, source: Any, workdir: Path) -> None:
        self.repos_in += 1
        view = RepoView.from_row(repo)
        entry = self.optout.matches(repo.full_name)
        if entry:
            self.reject_repo(repo, view, "opted_out", f"opt-out entry {entry!r}")
            return
        metadata = MetadataFilter(self.settings.curate_min_stars)
        verdict = metadata.filter(view)
        self.flags.update(f for f in view.flags)
        if not verdict.keep:
            self.reject_repo(repo, view, verdict.reason or "metadata", verdict.detail)
            return
        known = normalise_spdx(view.license)
        if known is not None and not license_allowed(known, self.settings.curate_license_policy)[0]:
            self.reject_repo(repo, view, "license_not_permitted", f"{known} under the policy (metadata)")
            return
        try:
            fetched = source.fetch(repo, workdir / "fetch")
        except Exception as exc:  # a data fault of one repository, recorded, never fatal
            self.reject_repo(repo, view, "fetch_failed", f"{type(exc).__name__}: {exc}"[:500])
            return
        kind = fetched.kind or archive_kind(Path(fetched.path))
        tree = workdir / "tree"
        try:
            extraction = extract_archive(Path(fetched.path), kind, tree, self.limits)
        except ArchiveRejected as exc:
            self._store_snapshot(repo, fetched.commit, Path(fetched.path), kind, None)
            self.reject_repo(repo, view, exc.reason, exc.detail)
            return
        snapshot_id = self._store_snapshot(repo, fetched.commit, Path(fetched.path), kind, extraction)
        self._record_members(repo, fetched.commit, extraction.rejected)
        files = extract_code(
            extraction.root, extraction.files, self.languages, self.settings.curate_max_file_bytes, self.table
        )
        # license: metadata, else the LICENSE file
        lic = LicenseFilter(self.settings.curate_license_policy, extraction.root, extraction.files)
        verdict = lic.filter(view)
        if not verdict.keep:
            self.reject_repo(repo, view, verdict.reason or "license", verdict.detail)
            return
        # README check (LLM when configured, else the labelled heuristic)
        readme_rel = find_readme(extraction.root, extraction.files)
        text = (
            read_readme(extraction.root, readme_rel, self.settings.curate_readme_max_chars)
            if readme_rel
            else (repo.description or "")
        )
        if text.strip():
            check = check_readmes([text], self.llm)[0]
            check.readme_path = readme_rel or "description"
            view.extra["readme_check"] = check.to_dict()
            self.readme_methods[check.method] += 1
            self.flags.update(check.flags)
        verdict = ReadmeFilter().filter(view)
        if not verdict.keep:
            self.reject_repo(repo, view, verdict.reason or "readme", verdict.detail)
            return
        code, docs, share = code_share(files, self.languages)
        view.extra.update(code_bytes=code, docs_bytes=docs, code_share=round(share, 4))
        verdict = DocsOnlyFilter(self.settings.curate_min_code_share).filter(view)
        if not verdict.keep:
            self.reject_repo(repo, view, verdict.reason or "docs_only", verdict.detail)
            return
        self._keep_repository(repo, view, snapshot_id, fetched.commit, files)

    def _store_snapshot(self, repo: Repository, commit: str, path: Path, kind: str, extraction: Any) -> int:
        """Store the fetched archive once (``snapshots/<repo id>/<commit>.<ext>``) and upsert its row."""
        from scicodepile.store.base import sha256_file

        key = snapshot_key(repo.id, commit, kind)
        if kind == "dir":
            packed = path.parent / f".{path.name}-snapshot.tar.gz"
            if not self.store.exists(key) and extraction is not None:
                import tarfile

                with tarfile.open(packed, "w:gz") as tf:  # the safely copied tree, never the raw folder
                    for rel in extraction.files:
                        tf.add(extraction.root / rel, arcname=rel, recursive=False)
                self.store.put_file(key, packed)
            digest, size = None, None
        else:
            if not self.store.exists(key):
                self.store.put_file(key, path)
            digest, size = sha256_file(path), path.stat().st_size
        with session_scope(self.settings) as s:
            rows = upsert(
                s,
                Snapshot,
                [
                    {
                        "repository_id": repo.id,
                        "commit": commit,
                        "archive_key": key,
                        "sha256": digest,
                        "bytes": size,
                        "file_count": len(extraction.files) if extraction is not None else None,
                    }
                ],
                keys=["repository_id", "commit"],
                returning=["id"],
            )
            return int(rows[0][0])

    def _record_members(self, repo: Repository, commit: str, rejected: list[tuple[str, str, str]]) -> None:
        """Archive members that were never extracted (links, devices, traversal...): rejections rows."""
        if not rejected:
            return
        for _, reason, _ in rejected:
            self.member_rejected[reason] += 1
            self.report.reject(f"member:{reason}")
        with session_scope(self.settings) as s:
            upsert(
                s,
                Rejection,
                [
                    {
                        "stage": STAGE,
                        "subject_type": "archive_member",
                        "subject_key": f"{repo.full_name}@{commit}:{name}"[:1024],
                        "reason": reason[:128],
                        "detail": (detail or None) and detail[:4000],
                    }
                    for name, reason, detail in rejected
                ],
                keys=["stage", "subject_type", "subject_key", "reason"],
                update=["detail"],
            )

    def _keep_repository(
        self, repo: Repository, view: RepoView, snapshot_id: int, commit: str, files: list[ExtractedFile]
    ) -> None:
        from scicodepile.curate.dedup import content_sha256

        domain = (view.extra.get("readme_check") or {}).get("domain") or repo.domain
        rows: list[dict[str, Any]] = []
        staged: dict[str, dict[str, Any]] = {}
        with session_scope(self.settings) as s:
            existing = {
                path: (kept, sha, shard)
                for path, kept, sha, shard in s.execute(
                    select(File.path, File.kept, File.sha256, File.shard_key).where(
                        File.snapshot_id == snapshot_id
                    )
                )
            }
        published_shas: set[str] = set()
        flipped: list[dict[str, Any]] = []
        for f in files:
            self.files_in += 1
            if f.kept:
                verdict = self.file_filter.filter(f)
                if not verdict.keep:
                    f.reason, f.detail = verdict.reason, verdict.detail
            if f.kept and self.settings.curate_redact:
                f.text, counts = redact(f.text or "")
                self.redactions.update(counts)
            before = existing.get(f.path)
            was_published = before is not None and before[0] and _is_published_elsewhere(self.ctx, before[2])
            if f.kept:
                sha = content_sha256(f.text or "")
                if was_published and before[1] == sha:  # already in F1 (an earlier run): leave it there
                    self.already_published += 1
                    published_shas.add(sha)
                    continue
                size = len((f.text or "").encode("utf-8", "surrogatepass"))
                self.encodings[f.encoding or "?"] += 1
                staged[f.path] = {
                    "content": f.text,
                    "repository": repo.full_name,
                    "commit": commit,
                    "path": f.path,
                    "language": f.language,
                    "license": view.license,
                    "sha256": sha,
                    "size": size,
                    "domain": domain,
                    "dedup_cluster": None,
                }
            else:
                sha = f.raw_sha256 or "0" * 64
                size = f.size
                self.file_rejected[f.reason or "?"] += 1
                self.report.reject(f"file:{f.reason}")
            if was_published:  # published earlier, changed now: retract it from F1 (a tombstone)
                flipped.append({"path": f.path, "reason": f.reason or "changed"})
            rows.append(
                {
                    "snapshot_id": snapshot_id,
                    "repository_id": repo.id,
                    "path": f.path,
                    "sha256": sha,
                    "language": f.language,
                    "bytes": size,
                    "license": view.license,
                    "dedup_cluster": None,
                    "kept": f.kept,
                    "rejection_reason": f.reason,
                    "shard_key": before[2] if was_published and not f.kept else None,
                }
            )
        new_shas = published_shas | {r["sha256"] for r in rows if r["kept"]}
        with session_scope(self.settings) as s:
            for flip in flipped:
                self._retire(
                    s,
                    repo,
                    [File.snapshot_id == snapshot_id, File.path == flip["path"]],
                    flip["reason"],
                    f"re-curated at {commit}: now {flip['reason']}",
                    lambda *_: False,
                )
            ids = upsert(s, File, rows, keys=["snapshot_id", "path"], returning=["id", "path"])
            # earlier snapshots: files whose content the new snapshot lacks are superseded; unchanged
            # ones already in F1 stay there (their new copies become exact duplicates of them)
            self._retire(
                s,
                repo,
                [File.snapshot_id != snapshot_id],
                "superseded",
                f"replaced by {repo.full_name}@{commit}",
                lambda sha, shard: sha in new_shas and _is_published_elsewhere(self.ctx, shard),
            )
            rejected = [r for r in rows if not r["kept"]]
            if rejected:
                upsert(
                    s,
                    Rejection,
                    [
                        {
                            "stage": STAGE,
                            "subject_type": "file",
                            "subject_key": f"{repo.full_name}@{commit}:{r['path']}"[:1024],
                            "reason": r["rejection_reason"][:128],
                            "detail": next((f.detail for f in files if f.path == r["path"]), None),
                        }
                        for r in rejected
                    ],
                    keys=["stage", "subject_type", "subject_key", "reason"],
                    update=["detail"],
                )
            row = s.get(Repository, repo.id)
            row.status = "kept"
            row.rejection_stage = None
            row.rejection_reason = None
            row.needs_recurate = False
            row.license = view.license
            row.domain = domain
            row.stage_status = {
                **(row.stage_status or {}),
                STAGE: "kept",
                "curate_slug": self.slug,
                "curate_run": self.ctx.run,
            }
            row.extra = {**(row.extra or {}), **_repo_extra(view)}
        for file_id, path in ids:
            if path in staged:
                self.staging.append({"file_id": int(file_id), **staged[path]})
                self.files_kept += 1
        self.repos_kept += 1

    # -- the partition ---------------------------------------------------------------------------
    def run(self) -> StageReport:
        from scicodepile.curate.dedup import write_signature_shard
        from scicodepile.sources import get_source
        from scicodepile.store.parquet import write_shard

        source = self.ctx.params.get("source_object") or get_source(self.ctx.source, self.ctx)
        with session_scope(self.settings) as s:
            repos, settled = _repositories(s, self.ctx, self.index, self.count)
            s.expunge_all()
        for repo in settled:  # the opt-out list applies on every run, to what was kept earlier too
            entry = self.optout.matches(repo.full_name)
            if entry:
                self.repos_in += 1
                self.reject_repo(repo, RepoView.from_row(repo), "opted_out", f"opt-out entry {entry!r}")
        scratch = Path(self.settings.var_dir) / "work" / "curate"
        scratch.mkdir(parents=True, exist_ok=True)
        progress = Progress(f"curate shard {self.index + 1}/{self.count}: repositories", total=len(repos))
        try:
            for repo in repos:
                workdir = Path(tempfile.mkdtemp(prefix=f"repo-{repo.id}-", dir=scratch))
                try:
                    self.curate_repository(repo, source, workdir)
                finally:
                    shutil.rmtree(workdir, ignore_errors=True)
                progress.advance()
        finally:
            progress.finish()
            if self.llm is not None:
                self.llm.close()
        tomb_key = _tombstone_staging_key(self.ctx, self.index)
        if not self.tombstones and self.store.exists(tomb_key):  # a rerun keeps the first attempt's
            self.tombstones = {
                int(e["file_id"]): e for e in json.loads(self.store.get_bytes(tomb_key))["entries"]
            }
        self._write_tombstones()
        staging_key = _staging_key(self.ctx, self.index)
        write_shard(
            self.store,
            staging_key,
            self.staging,
            _staging_schema(),
            extra_manifest={"stage": STAGE, "kind": "staging", "shard": self.index},
        )
        sig_key = _signature_key(self.ctx, self.index)
        write_signature_shard(
            self.store,
            sig_key,
            ((str(r["file_id"]), r["content"]) for r in self.staging),
            minhash_config(self.settings),
        )
        for r in self.staging:
            self.lang_files[r["language"]] += 1
            self.lang_bytes[r["language"]] += r["size"]
        rep = self.report
        rep.kept = self.files_kept
        rep.outputs = [staging_key, sig_key, tomb_key]
        rep.details = {
            "repositories_in": self.repos_in,
            "repositories_kept": self.repos_kept,
            "files_in": self.files_in,
            "files_kept_before_dedup": self.files_kept,
            "files_already_published": self.already_published,
            "files_retired": dict(self.retired),
            "tombstones": len(self.tombstones),
            "repository_rejected": dict(self.repo_rejected),
            "file_rejected": dict(self.file_rejected),
            "member_rejected": dict(self.member_rejected),
            "flags": dict(self.flags),
            "redactions": dict(self.redactions),
            "readme_method": dict(self.readme_methods),
            "encodings": dict(self.encodings),
            "language_files_before_dedup": dict(self.lang_files),
            "language_bytes_before_dedup": dict(self.lang_bytes),
        }
        return rep


def _repo_extra(view: RepoView) -> dict[str, Any]:
    keep = ("readme_check", "license_source", "license_metadata", "code_bytes", "docs_bytes", "code_share")
    out = {k: view.extra[k] for k in keep if k in view.extra}
    if view.flags:
        out["curate_flags"] = sorted(set(view.flags))
    return out


def curate_shard(ctx: Any, ref: dict[str, Any]) -> dict[str, Any]:
    """Filter, fetch, extract and hash one shard of repositories (see the module docstring)."""
    index, count = int(ref["shard"]), int(ref["num_shards"])
    store = open_store(ctx.settings)
    part = _partition(ctx, "shard", index, count)
    report = run_partition(
        store, part, lambda: _ShardWork(ctx, index, count).run(), force=bool(ctx.params.get("force"))
    )
    return report.to_dict()


# ----------------------------------------------------------------------------------- dedup
def keep_rank(info: dict[str, Any]) -> tuple[Any, ...]:
    """The keep rule inside a duplicate cluster, smallest first: a permissive license, then more
    stars, then more forks, then the most recent push, then the smallest file id (deterministic)."""
    pushed = info.get("pushed_at")
    pushed_ts = pushed.timestamp() if isinstance(pushed, datetime) else 0.0
    return (
        0 if is_permissive(info.get("license")) else 1,
        -(info.get("stars") or 0),
        -(info.get("forks") or 0),
        -pushed_ts,
        int(info["id"]),
    )


def _file_info(session: Any, ids: list[int]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for start in range(0, len(ids), 5000):
        chunk = ids[start : start + 5000]
        stmt = (
            select(
                File.id,
                File.license,
                Repository.stars,
                Repository.forks,
                Repository.pushed_at,
                Repository.full_name,
                Snapshot.commit,
                File.path,
            )
            .join(Repository, Repository.id == File.repository_id)
            .join(Snapshot, Snapshot.id == File.snapshot_id)
            .where(File.id.in_(chunk))
        )
        for fid, lic, stars, forks, pushed, name, commit, path in session.execute(stmt):
            if isinstance(pushed, datetime) and pushed.tzinfo is None:
                pushed = pushed.replace(tzinfo=UTC)
            out[str(fid)] = {
                "id": fid,
                "license": lic,
                "stars": stars,
                "forks": forks,
                "pushed_at": pushed,
                "subject": f"{name}@{commit}:{path}",
            }
    return out


def _chunks(items: list[Any], size: int = 5000) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _run_file_ids(store: Any, ctx: Any, reports: list[dict[str, Any]]) -> list[int]:
    """The files this run staged (its new candidates), from the staging shards' ``file_id`` column."""
    import pyarrow.parquet as pq

    keys = [k for r in reports for k in r.get("outputs", []) if "/staging/" in k]
    if not keys:
        keys = [o.key for o in store.list(_run_prefix(ctx, "staging") + "/") if o.key.endswith(".parquet")]
    ids: set[int] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for i, key in enumerate(sorted(set(keys))):
            path = store.get_file(key, Path(tmp) / f"{i}.parquet")
            ids.update(int(x) for x in pq.read_table(path, columns=["file_id"]).column(0).to_pylist())
            path.unlink()
    return sorted(ids)


def _signature_keys(store: Any, ctx: Any, reports: list[dict[str, Any]]) -> list[str]:
    """This run's signature shards, then every earlier run's of the same config (global near-dup)."""
    own = [k for r in reports for k in r.get("outputs", []) if "/signatures/" in k]
    if not own:
        own = [o.key for o in store.list(_run_prefix(ctx, "signatures") + "/") if o.key.endswith(".parquet")]
    base = f"curate-work/{safe_segment(f1_slug(ctx.settings))}/"
    mine = _run_prefix(ctx, "")
    earlier = [
        o.key
        for o in store.list(base)
        if "/signatures/" in o.key and o.key.endswith(".parquet") and not o.key.startswith(mine)
    ]
    return sorted(set(own)) + sorted(earlier)


def _record_drops(
    session: Any,
    drops: dict[int, tuple[str, int]],
    reason: str,
    info: dict[str, dict[str, Any]],
    published: dict[int, str],
) -> None:
    """Drop files (``{file id: (cluster, keeper id)}``) with ``reason``; each rejection names its keeper."""
    if not drops:
        return
    for ids in _chunks(sorted(drops)):
        session.execute(update(File).where(File.id.in_(ids)).values(kept=False, rejection_reason=reason))
    _set_clusters(session, {d: c for d, (c, _) in drops.items()})

    def detail(doc: int) -> str:
        cluster, keeper = drops[doc]
        where = f"published in {published[keeper]}" if keeper in published else "kept by this run"
        what = reason.replace("_", " ")
        return f"{what} of {info[str(keeper)]['subject']} (file {keeper}, {where}); cluster {cluster}"

    upsert(
        session,
        Rejection,
        [
            {
                "stage": STAGE,
                "subject_type": "file",
                "subject_key": info[str(d)]["subject"][:1024],
                "reason": reason,
                "detail": detail(d),
            }
            for d in sorted(drops)
        ],
        keys=["stage", "subject_type", "subject_key", "reason"],
        update=["detail"],
    )


def _set_clusters(session: Any, clusters: dict[int, str]) -> None:
    by_cluster: dict[str, list[int]] = {}
    for doc, cluster in clusters.items():
        by_cluster.setdefault(cluster, []).append(doc)
    for cluster, docs in sorted(by_cluster.items()):
        for ids in _chunks(sorted(docs)):
            session.execute(update(File).where(File.id.in_(ids)).values(dedup_cluster=cluster[:64]))


def _published_files(session: Any, ctx: Any, condition: Any) -> dict[int, tuple[str, str]]:
    """``{file id: (sha256, shard key)}`` of kept files in other runs' F1 shards matching ``condition``."""
    stmt = select(File.id, File.sha256, File.shard_key).where(
        File.kept.is_(True), _published_elsewhere(ctx), condition
    )
    return {int(fid): (sha, shard) for fid, sha, shard in session.execute(stmt)}


def _decide(
    clusters: dict[int, str], new: set[int], published: dict[int, Any], rank: Any
) -> dict[int, tuple[str, int]]:
    """``{dropped new file: (cluster, keeper)}``: a cluster with a published file keeps its published
    files (the best ranked is named as keeper) and drops its new ones; otherwise the best ranked new
    file is kept."""
    members: dict[str, list[int]] = {}
    for doc, cluster in clusters.items():
        members.setdefault(cluster, []).append(doc)
    drops: dict[int, tuple[str, int]] = {}
    for cluster, docs in members.items():
        fresh = [d for d in docs if d in new]
        if len(docs) < 2 or not fresh:
            continue
        old = [d for d in docs if d in published]
        keeper = min(old or fresh, key=rank)
        drops.update({d: (cluster, keeper) for d in fresh if d != keeper})
    return drops


def dedup_corpus(ctx: Any, reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Exact then near-duplicate removal of this run's new files, against each other and against every
    file already published under this config (which always stays); one file kept per cluster.

    Memory: the near-dup index is bounded (see :mod:`scicodepile.curate.dedup.index`); the exact step
    holds an id and a sha256 per NEW file of this run (about 250 bytes each), so a first run at full
    scale can be split into several runs (``limit``): later runs dedup against the earlier ones.
    """
    store = open_store(ctx.settings)

    def work() -> StageReport:
        from scicodepile.curate.dedup import find_duplicate_clusters

        config = minhash_config(ctx.settings)
        report = StageReport(STAGE)
        run_ids = _run_file_ids(store, ctx, reports)
        with session_scope(ctx.settings) as s:
            # a rerun re-decides this run's files (and only them): earlier dedup drops are undone first
            dropped_before = [
                int(fid)
                for ids in _chunks(run_ids)
                for fid in s.scalars(
                    select(File.id).where(File.id.in_(ids), File.rejection_reason.in_(DEDUP_REASONS))
                )
            ]
            info = _file_info(s, dropped_before)
            subjects = [v["subject"][:1024] for v in info.values()]
            for ids in _chunks(run_ids):
                s.execute(
                    update(File)
                    .where(File.id.in_(ids), File.rejection_reason.in_(DEDUP_REASONS))
                    .values(kept=True, rejection_reason=None)
                )
                s.execute(
                    update(File)
                    .where(File.id.in_(ids), ~_published_elsewhere(ctx) | File.shard_key.is_(None))
                    .values(dedup_cluster=None)
                )
            for chunk in _chunks(subjects):
                s.execute(
                    Rejection.__table__.delete().where(
                        Rejection.stage == STAGE,
                        Rejection.subject_type == "file",
                        Rejection.reason.in_(DEDUP_REASONS),
                        Rejection.subject_key.in_(chunk),
                    )
                )
            sha_of: dict[int, str] = {}
            for ids in _chunks(run_ids):
                stmt = select(File.id, File.sha256).where(
                    File.id.in_(ids),
                    File.kept.is_(True),
                    File.shard_key.is_(None) | ~_published_elsewhere(ctx),
                )
                sha_of.update({int(fid): sha for fid, sha in s.execute(stmt)})
            new = set(sha_of)
            # exact: against published files first (they win), then among the new files
            published: dict[int, tuple[str, str]] = {}
            for shas in _chunks(sorted(set(sha_of.values()))):
                published.update(_published_files(s, ctx, File.sha256.in_(shas)))
            published_shas = {sha for sha, _ in published.values()}
            copies = Counter(sha_of.values())
            exact = {d: f"exact-{sha[:16]}" for d, sha in sha_of.items() if copies[sha] > 1}
            exact.update({d: f"exact-{sha[:16]}" for d, sha in sha_of.items() if sha in published_shas})
            exact.update({d: f"exact-{sha[:16]}" for d, (sha, _) in published.items()})
            del copies
            info.update(_file_info(s, [d for d in exact if str(d) not in info]))
            exact_drops = _decide(exact, new, published, lambda d: keep_rank(info[str(d)]))
            shards = {d: shard for d, (_, shard) in published.items()}
            _record_drops(s, exact_drops, "exact_duplicate", info, shards)
            sizes = Counter(exact.values())
            _set_clusters(
                s, {d: c for d, c in exact.items() if d in new and d not in exact_drops and sizes[c] > 1}
            )
        keys = _signature_keys(store, ctx, reports)
        scratch = Path(ctx.settings.var_dir) / "work" / "dedup"
        scratch.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=scratch) as tmp:
            near_raw = find_duplicate_clusters(store, keys, config, Path(tmp)) if keys else {}
        live_new = new - set(exact_drops)
        with session_scope(ctx.settings) as s:
            candidates = [int(d) for d in near_raw if int(d) not in live_new]
            near_published: dict[int, tuple[str, str]] = {}
            for ids in _chunks(candidates):
                near_published.update(_published_files(s, ctx, File.id.in_(ids)))
            near = {
                int(d): f"near-{c}"
                for d, c in near_raw.items()
                if int(d) in live_new or int(d) in near_published
            }
            info.update(_file_info(s, [d for d in near if str(d) not in info]))
            near_drops = _decide(near, live_new, near_published, lambda d: keep_rank(info[str(d)]))
            shards = {d: shard for d, (_, shard) in near_published.items()}
            _record_drops(s, near_drops, "near_duplicate", info, shards)
            sizes = Counter(near.values())
            _set_clusters(
                s, {d: c for d, c in near.items() if d in live_new and d not in near_drops and sizes[c] > 1}
            )
        dropped = len(exact_drops) + len(near_drops)
        files_in = len(new)
        report.kept = files_in - dropped
        report.reject("file:exact_duplicate", len(exact_drops))
        report.reject("file:near_duplicate", len(near_drops))
        report.details = {
            "files_in": files_in,
            "exact_duplicates": len(exact_drops),
            "near_duplicates": len(near_drops),
            "exact_duplicates_of_published": sum(1 for _, k in exact_drops.values() if k in published),
            "near_duplicates_of_published": sum(1 for _, k in near_drops.values() if k in near_published),
            "exact_clusters": len({c for c, _ in exact_drops.values()}),
            "near_clusters": len({c for c, _ in near_drops.values()}),
            "signature_shards": len(keys),
            "dedup_ratio": round(dropped / files_in, 4) if files_in else 0.0,
            "minhash": config.slug,
        }
        return report

    part = _partition(ctx, "dedup")
    return run_partition(store, part, work, force=bool(ctx.params.get("force"))).to_dict()


# ---------------------------------------------------------------------------------- publish
def publish_shard(ctx: Any, ref: dict[str, Any]) -> dict[str, Any]:
    """Write this run's F1 shard of one repository shard: its newly kept files, with a manifest, and the
    tombstones of earlier rows it retracted (see the module docstring).  No empty shard is written
    (``datasets`` cannot read one); rerunning the run rewrites the same keys."""
    index, count = int(ref["shard"]), int(ref["num_shards"])
    store = open_store(ctx.settings)

    def work() -> StageReport:
        from scicodepile.store.parquet import read_shard, write_shard

        slug = f1_slug(ctx.settings)
        key = f1_key(ctx, index)
        staging = read_shard(store, _staging_key(ctx, index))
        ids = [int(i) for i in staging.column("file_id").to_pylist()]
        with session_scope(ctx.settings) as s:
            state: dict[int, tuple[bool, str | None, str | None, str]] = {}
            for chunk in _chunks(ids):
                stmt = select(File.id, File.kept, File.dedup_cluster, File.shard_key, File.sha256).where(
                    File.id.in_(chunk)
                )
                state.update({fid: (kept, cl, shard, sha) for fid, kept, cl, shard, sha in s.execute(stmt)})
            # new rows only: a file already in another run's shard is never written twice
            live = {fid: v for fid, v in state.items() if v[0] and not _is_published_elsewhere(ctx, v[2])}
            # safety net for overlapping runs: a sha256 another run published meanwhile is a duplicate
            taken: dict[str, int] = {}
            for shas in _chunks(sorted({v[3] for v in live.values()})):
                for fid, (sha, _) in _published_files(s, ctx, File.sha256.in_(shas)).items():
                    taken.setdefault(sha, fid)
            late = {fid: (f"exact-{v[3][:16]}", taken[v[3]]) for fid, v in live.items() if v[3] in taken}
            if late:
                info = _file_info(s, sorted({*late, *(k for _, k in late.values())}))
                shards = {
                    k: sh
                    for k, (_, sh) in _published_files(
                        s, ctx, File.id.in_([k for _, k in late.values()])
                    ).items()
                }
                _record_drops(s, late, "exact_duplicate", info, shards)
        rows = []
        lang_files: Counter[str] = Counter()
        lang_bytes: Counter[str] = Counter()
        kept_ids = []
        for row in _iter_rows(staging):
            fid = int(row.pop("file_id"))
            if fid not in live or fid in late:
                continue
            kept_ids.append(fid)
            row["dedup_cluster"] = live[fid][1]
            rows.append(row)
            lang_files[row["language"]] += 1
            lang_bytes[row["language"]] += int(row["size"])
        tomb_staging = _tombstone_staging_key(ctx, index)
        tombstones = (
            json.loads(store.get_bytes(tomb_staging))["entries"] if store.exists(tomb_staging) else []
        )
        tomb = tombstone_key(key)
        if tombstones or store.exists(tomb):
            body = {
                "dataset": "F1",
                "config_slug": slug,
                "run": ctx.run,
                "shard": index,
                "entries": tombstones,
            }
            store.put_bytes(tomb, json.dumps(body, indent=1).encode(), "application/json")
        manifest = None
        if rows:
            manifest = write_shard(
                store,
                key,
                rows,
                _f1_schema(),
                extra_manifest={
                    "dataset": "F1",
                    "config_slug": slug,
                    "shard": index,
                    "num_shards": count,
                    "run": ctx.run,
                    "source": ctx.source,
                    "languages": dict(lang_files),
                    "layout": "F1 = every f1/<slug>/run=*/part-*.parquet minus the rows in *.superseded.json",
                    "superseded": {"key": tomb, "rows": len(tombstones)} if tombstones else None,
                    "provenance": "every row carries repository, commit, path and license",
                    "settings": {n: ctx.settings.public_dict()[n] for n in CURATE_SETTINGS},
                    "minhash": minhash_config(ctx.settings).slug,
                    "created_at": datetime.now(UTC).isoformat(),
                },
            )
        elif store.exists(key):  # an earlier attempt of this run wrote rows that are no longer new
            store.delete(key)
            store.delete(manifest_key(key))
        with session_scope(ctx.settings) as s:
            s.execute(
                update(File)
                .where(File.shard_key == key, File.id.notin_(kept_ids or [-1]))
                .values(shard_key=None)
            )
            for chunk in _chunks(kept_ids):
                s.execute(update(File).where(File.id.in_(chunk)).values(shard_key=key))
            if manifest is None:
                s.execute(Artifact.__table__.delete().where(Artifact.key == key))
            else:
                upsert(
                    s,
                    Artifact,
                    [
                        {
                            "key": key,
                            "stage": STAGE,
                            "config_slug": slug,
                            "partition": f"run={safe_segment(ctx.run)}/{index:05d}-of-{count:05d}",
                            "sha256": manifest["sha256"],
                            "bytes": manifest["bytes"],
                            "rows": manifest["rows"],
                            "validated": None,
                            "validation": {},
                        }
                    ],
                    keys=["key"],
                )
        report = StageReport(STAGE, kept=len(rows), outputs=[key] if rows else [])
        if late:
            report.reject("file:exact_duplicate", len(late))
        report.details = {
            "language_files": dict(lang_files),
            "language_bytes": dict(lang_bytes),
            "superseded": len(tombstones),
            "tombstones": [tomb] if tombstones else [],
            "late_exact_duplicates": len(late),
        }
        return report

    part = _partition(ctx, "publish", index, count)
    return run_partition(store, part, work, force=bool(ctx.params.get("force"))).to_dict()


# ------------------------------------------------------------------------------------- gate
def gate_f1(ctx: Any) -> dict[str, Any]:
    """Run the F1 great-expectations suite; raise QualityGateFailed (naming the expectation) on failure.

    Per-shard expectations run on this run's shards; the whole F1 (the union of all runs minus the
    tombstoned rows) must be non-empty, hold no sha256 twice, and match the kept files of the
    ``files`` table row for row; the duplicate ratio is this run's (from its dedup report).
    """
    from scicodepile.errors import QualityGateFailed
    from scicodepile.pipeline import is_done
    from scicodepile.quality import validate_f1

    store = open_store(ctx.settings)
    keys = sorted(o.key for o in store.list(f1_run_prefix(ctx)) if o.key.endswith(".parquet"))
    union = _union_stats(store, ctx)
    dedup = is_done(store, _partition(ctx, "dedup"))
    if dedup is None:
        raise QualityGateFailed(
            "f1", [f"dedup has not completed for run {ctx.run!r}: run dedup_corpus first"]
        )
    ratio = float(dedup.details.get("dedup_ratio", 0.0))
    report = StageReport(STAGE)
    try:
        results = validate_f1(
            store,
            keys,
            languages=_languages(ctx.settings),
            max_bytes=ctx.settings.curate_max_file_bytes,
            duplicate_ratio=ratio,
            max_duplicate_ratio=ctx.settings.curate_max_duplicate_ratio,
            union=union,
        )
    except QualityGateFailed as exc:
        _mark_validated(ctx, keys, False, {"failures": exc.failures, "union": union})
        raise
    _mark_validated(ctx, keys, True, {"suites": [r.to_dict() for r in results], "union": union})
    report.kept = len(keys)
    report.details = {
        "gate": "passed",
        "suites": len(results),
        "duplicate_ratio": round(ratio, 4),
        "run_shards": len(keys),
        "union": union,
    }
    return report.to_dict()


def _read_columns(store: Any, key: str, columns: list[str]) -> Any:
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as tmp:
        return pq.read_table(store.get_file(key, Path(tmp) / "shard.parquet"), columns=columns)


def _union_stats(store: Any, ctx: Any) -> dict[str, int]:
    """Whole-F1 figures for the gate, reading only the columns it needs (sha256; the row identity only
    of shards with tombstones): live rows, sha256 seen more than once, and live rows minus the kept
    files the database says are published under this config."""
    import pyarrow as pa
    import pyarrow.compute as pc

    dead = _tombstone_index(f1_tombstones(store, ctx.settings))
    chunks = []
    shards = f1_shard_keys(store, ctx.settings)
    for key in shards:
        if key in dead:
            table = _read_columns(store, key, ["sha256", "repository", "commit", "path"])
            keep = [
                _row_id(r) not in dead[key]
                for r in _iter_rows(table.select(["repository", "commit", "path"]))
            ]
            table = table.filter(pa.array(keep, type=pa.bool_()))
        else:
            table = _read_columns(store, key, ["sha256"])
        chunks.extend(table.column("sha256").chunks)
    hashes = pa.chunked_array(chunks, type=pa.string())
    rows = len(hashes)
    distinct = pc.count_distinct(hashes).as_py() if rows else 0
    with session_scope(ctx.settings) as s:
        in_db = (
            s.scalar(
                select(func.count())
                .select_from(File)
                .where(
                    File.kept.is_(True),
                    File.shard_key.like(_like(f1_prefix(ctx.settings)) + "%", escape="\\"),
                )
            )
            or 0
        )
    return {
        "shards": len(shards),
        "rows": rows,
        "tombstoned": sum(len(v) for v in dead.values()),
        "duplicate_sha256": rows - distinct,
        "unaccounted_rows": rows - in_db,
    }


def _mark_validated(ctx: Any, keys: list[str], ok: bool, validation: dict[str, Any]) -> None:
    with session_scope(ctx.settings) as s:
        for key in keys:
            row = s.get(Artifact, key)
            if row is not None:
                row.validated = ok
                row.validation = validation


# --------------------------------------------------------------------------------- whole stage
def run_curate_stage(ctx: Any) -> StageReport:
    """plan -> every shard -> dedup -> publish every shard -> gate, in order (the CLI's path).

    The report's details carry per-filter counts, per-language files and bytes and the dedup ratio.
    """
    start = time.monotonic()
    refs = plan_curate(ctx)
    shard_reports = [curate_shard(ctx, ref) for ref in refs]
    dedup = dedup_corpus(ctx, shard_reports)
    published = [publish_shard(ctx, ref) for ref in refs]
    gate = gate_f1(ctx)
    return summarise(shard_reports, dedup, published, gate, seconds=time.monotonic() - start)


def summarise(
    shards: Iterable[dict[str, Any]],
    dedup: dict[str, Any],
    published: Iterable[dict[str, Any]],
    gate: dict[str, Any],
    seconds: float = 0.0,
) -> StageReport:
    """One StageReport for the whole curate stage from the partition reports."""
    merged = StageReport(STAGE)
    for r in shards:
        merged.merge(StageReport.from_dict(STAGE, r))
    pub = StageReport(STAGE)
    for r in published:
        pub.merge(StageReport.from_dict(STAGE, r))
    d = merged.details
    dd = dedup.get("details", {})
    report = StageReport(STAGE, kept=pub.kept, seconds=seconds)
    report.rejected = merged.rejected + Counter(dedup.get("rejected", {})) + pub.rejected
    report.outputs = list(pub.outputs)
    report.details = {
        "repositories": {
            "input": d.get("repositories_in", 0),
            "kept": d.get("repositories_kept", 0),
            "rejected": d.get("repository_rejected", {}),
        },
        "files": {
            "input": d.get("files_in", 0),
            "kept_before_dedup": d.get("files_kept_before_dedup", 0),
            "kept": pub.kept,
            "already_published": d.get("files_already_published", 0),
            "retired": d.get("files_retired", {}),
            "rejected": d.get("file_rejected", {}),
            "archive_members_rejected": d.get("member_rejected", {}),
        },
        "languages": {
            lang: {"files": n, "bytes": pub.details.get("language_bytes", {}).get(lang, 0)}
            for lang, n in sorted(pub.details.get("language_files", {}).items())
        },
        "dedup": {
            k: dd.get(k)
            for k in ("files_in", "exact_duplicates", "near_duplicates", "dedup_ratio", "minhash")
        },
        "dedup_ratio": dd.get("dedup_ratio", 0.0),
        "flags": d.get("flags", {}),
        "readme_method": d.get("readme_method", {}) or {"none": 0},
        "redactions": d.get("redactions", {}),
        "encodings": d.get("encodings", {}),
        "gate": gate.get("details", {}).get("gate", "?"),
        "f1": {
            "run_shards": len(pub.outputs),
            "tombstones": pub.details.get("superseded", 0),
            "union": gate.get("details", {}).get("union", {}),
        },
    }
    return report
