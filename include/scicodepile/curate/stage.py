"""The curate stage: repositories in, F1 Parquet shards out.

Per shard of repositories (:func:`curate_shard`): opt-out list, metadata filter (stars, forks,
archived, empty), fetch at a pinned commit (stored once in the object store), safe extraction, code
extraction, license policy, README check (LLM or the labelled heuristic), docs-only filter, The Stack
file filters, secret redaction, exact hashes and MinHash signatures.  Kept file contents go to a
staging Parquet shard; every file gets a ``files`` row (kept, or its rejection reason) and every
rejection a ``rejections`` row.

Then once (:func:`dedup_corpus`): exact duplicates (same normalised sha256) and near duplicates
(MinHash LSH clusters) over the whole corpus, keeping one file per cluster by the stated rule
(:func:`keep_rank`).  Then per shard (:func:`publish_shard`): the F1 shard of kept files with its
manifest, and (:func:`gate_f1`) the great-expectations gate.

Every step is a partition with a completion marker; rows are upserted on natural keys.
"""

from __future__ import annotations

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
from scicodepile.curate.licenses import is_permissive, license_allowed, normalise_spdx
from scicodepile.curate.optout import load_optout
from scicodepile.curate.redact import redact
from scicodepile.db import record_rejection, session_scope, upsert
from scicodepile.db.models import Artifact, File, Rejection, Repository, Snapshot
from scicodepile.pipeline import Partition, StageReport, run_partition, shard_of
from scicodepile.store import open_store
from scicodepile.store.keys import dataset_prefix, safe_segment, shard_key, snapshot_key

log = logging.getLogger("scicodepile")

STAGE = "curate"
DEDUP_REASONS = ("exact_duplicate", "near_duplicate")
CURATE_SETTINGS = (
    "curate_min_stars",
    "curate_languages",
    "curate_min_code_share",
    "curate_license_policy",
    "curate_max_file_bytes",
    "curate_max_line_length",
    "curate_max_mean_line_length",
    "curate_min_alnum_fraction",
    "curate_redact",
)


def _f1_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("content", pa.string()),
            ("repository", pa.string()),
            ("commit", pa.string()),
            ("path", pa.string()),
            ("language", pa.string()),
            ("license", pa.string()),
            ("sha256", pa.string()),
            ("size", pa.int64()),
            ("domain", pa.string()),
            ("dedup_cluster", pa.string()),
        ]
    )


def _staging_schema() -> Any:
    import pyarrow as pa

    return pa.schema([("file_id", pa.int64()), *[(f.name, f.type) for f in _f1_schema()]])


# ------------------------------------------------------------------------------------- configs
def minhash_config(settings: Any) -> Any:
    """The near-dup config named by the ``dedup_*`` settings (defaults while they are absent)."""
    from scicodepile.curate.dedup import MinhashConfig

    try:
        return MinhashConfig.from_settings(settings)
    except AttributeError:
        return MinhashConfig()


def f1_slug(settings: Any) -> str:
    """Output name of F1 for these settings: ``<minhash slug>-<hash of the curate settings and the
    README heuristic's version>``, so changed filters never overwrite earlier outputs."""
    import hashlib

    from scicodepile.curate.filters.readme import load_heuristic

    basis = f"{settings.slug(*CURATE_SETTINGS)}:heuristic-v{load_heuristic().version}"
    return f"{minhash_config(settings).slug}-{hashlib.sha256(basis.encode()).hexdigest()[:10]}"


def _run_prefix(ctx: Any, what: str) -> str:
    return f"curate-work/{safe_segment(f1_slug(ctx.settings))}/{safe_segment(ctx.run)}/{what}"


def _staging_key(ctx: Any, index: int) -> str:
    return f"{_run_prefix(ctx, 'staging')}/part-{index:05d}.parquet"


def _signature_key(ctx: Any, index: int) -> str:
    return f"{_run_prefix(ctx, 'signatures')}/part-{index:05d}.parquet"




def _languages(settings: Any) -> frozenset[str]:
    return parse_languages(settings.curate_languages)


def _partition(ctx: Any, step: str, index: int = 0, count: int = 1) -> Partition:
    return Partition(f"{STAGE}-{step}", index, count, run=f"{ctx.run}-{f1_slug(ctx.settings)}")


# ------------------------------------------------------------------------------------- planning
def plan_curate(ctx: Any) -> list[dict[str, Any]]:
    """One ref per shard of repositories (``shard_of(repository id) mod num_shards``)."""
    n = max(1, int(ctx.num_shards))
    return [{"shard": i, "num_shards": n} for i in range(n)]


def _repositories(session: Any, ctx: Any, shard: int, num_shards: int) -> list[Repository]:
    """Repositories of this source that the crawl did not reject (curate re-decides its own)."""
    stmt = select(Repository).where(Repository.source == ctx.source).order_by(Repository.id)
    rows = [
        r
        for r in session.scalars(stmt)
        if (r.status != "rejected" or r.rejection_stage == STAGE) and shard_of(r.id, num_shards) == shard
    ]
    if ctx.limit:
        rows = rows[: ctx.limit]
    return rows


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
        self.llm = self._llm()

    def _llm(self) -> Any | None:
        try:
            from scicodepile.llm import get_llm, llm_configured
        except ImportError:
            return None
        return get_llm(self.settings) if llm_configured(self.settings) else None

    # -- rejections ----------------------------------------------------------------------------
    def reject_repo(self, repo: Repository, view: RepoView, reason: str, detail: str | None) -> None:
        self.repo_rejected[reason] += 1
        self.report.reject(f"repository:{reason}")
        with session_scope(self.settings) as s:
            row = s.get(Repository, repo.id)
            row.status = "rejected"
            row.rejection_stage = STAGE
            row.rejection_reason = reason[:128]
            row.stage_status = {**(row.stage_status or {}), STAGE: "rejected"}
            row.extra = {**(row.extra or {}), **_repo_extra(view)}
            record_rejection(s, STAGE, "repository", repo.full_name, reason, detail)

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
        for f in files:
            self.files_in += 1
            if f.kept:
                verdict = self.file_filter.filter(f)
                if not verdict.keep:
                    f.reason, f.detail = verdict.reason, verdict.detail
            if f.kept and self.settings.curate_redact:
                f.text, counts = redact(f.text or "")
                self.redactions.update(counts)
            if f.kept:
                sha = content_sha256(f.text or "")
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
                    "shard_key": None,
                }
            )
        with session_scope(self.settings) as s:
            ids = upsert(s, File, rows, keys=["snapshot_id", "path"], returning=["id", "path"])
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
            row.stage_status = {**(row.stage_status or {}), STAGE: "kept"}
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
            repos = _repositories(s, self.ctx, self.index, self.count)
            s.expunge_all()
        scratch = Path(self.settings.var_dir) / "work" / "curate"
        scratch.mkdir(parents=True, exist_ok=True)
        try:
            for repo in repos:
                workdir = Path(tempfile.mkdtemp(prefix=f"repo-{repo.id}-", dir=scratch))
                try:
                    self.curate_repository(repo, source, workdir)
                finally:
                    shutil.rmtree(workdir, ignore_errors=True)
        finally:
            if self.llm is not None:
                self.llm.close()
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
        rep.outputs = [staging_key, sig_key]
        rep.details = {
            "repositories_in": self.repos_in,
            "repositories_kept": self.repos_kept,
            "files_in": self.files_in,
            "files_kept_before_dedup": self.files_kept,
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


def _scope(ctx: Any) -> Any:
    """Files of kept repositories of this source: the corpus deduplicated together."""
    return (
        select(File.id)
        .join(Repository, Repository.id == File.repository_id)
        .where(Repository.source == ctx.source, Repository.status == "kept")
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


def _apply_drops(
    session: Any, clusters: dict[str, str], drops: set[str], reason: str, info: dict[str, dict[str, Any]]
) -> None:
    by_cluster: dict[str, list[int]] = {}
    for doc, cluster in clusters.items():
        by_cluster.setdefault(cluster, []).append(int(doc))
    for cluster, ids in by_cluster.items():
        for start in range(0, len(ids), 5000):
            session.execute(
                update(File).where(File.id.in_(ids[start : start + 5000])).values(dedup_cluster=cluster[:64])
            )
    dropped = sorted(int(d) for d in drops)
    for start in range(0, len(dropped), 5000):
        session.execute(
            update(File)
            .where(File.id.in_(dropped[start : start + 5000]))
            .values(kept=False, rejection_reason=reason)
        )
    if dropped:
        upsert(
            session,
            Rejection,
            [
                {
                    "stage": STAGE,
                    "subject_type": "file",
                    "subject_key": info[str(d)]["subject"][:1024],
                    "reason": reason,
                    "detail": f"duplicate in cluster {clusters[str(d)]}",
                }
                for d in dropped
            ],
            keys=["stage", "subject_type", "subject_key", "reason"],
            update=["detail"],
        )


def dedup_corpus(ctx: Any, reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Exact then near-duplicate removal over every kept file of the run; one file kept per cluster."""
    store = open_store(ctx.settings)

    def work() -> StageReport:
        from scicodepile.curate.dedup import find_duplicate_clusters, select_keepers

        config = minhash_config(ctx.settings)
        report = StageReport(STAGE)
        with session_scope(ctx.settings) as s:
            scope = _scope(ctx)
            # a rerun re-decides: earlier dedup drops are undone first
            s.execute(
                update(File)
                .where(File.id.in_(scope), File.rejection_reason.in_(DEDUP_REASONS))
                .values(kept=True, rejection_reason=None)
            )
            s.execute(update(File).where(File.id.in_(scope)).values(dedup_cluster=None))
            s.execute(
                Rejection.__table__.delete().where(
                    Rejection.stage == STAGE, Rejection.reason.in_(DEDUP_REASONS)
                )
            )
            files_in = (
                s.scalar(select(func.count()).select_from(File).where(File.id.in_(scope), File.kept)) or 0
            )
            dup_hashes = (
                select(File.sha256)
                .where(File.id.in_(scope), File.kept)
                .group_by(File.sha256)
                .having(func.count() > 1)
            )
            exact_rows = s.execute(
                select(File.id, File.sha256).where(File.id.in_(scope), File.kept, File.sha256.in_(dup_hashes))
            ).all()
            exact_clusters = {str(fid): f"exact-{sha[:16]}" for fid, sha in exact_rows}
            info = _file_info(s, [int(d) for d in exact_clusters])
            exact_drops = select_keepers(exact_clusters, lambda d: keep_rank(info[d]))
            _apply_drops(s, exact_clusters, exact_drops, "exact_duplicate", info)
        keys = [k for r in reports for k in r.get("outputs", []) if "/signatures/" in k]
        if not keys:
            keys = [
                o.key for o in store.list(_run_prefix(ctx, "signatures") + "/") if o.key.endswith(".parquet")
            ]
        scratch = Path(ctx.settings.var_dir) / "work" / "dedup"
        scratch.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=scratch) as tmp:
            near = find_duplicate_clusters(store, keys, config, Path(tmp)) if keys else {}
        with session_scope(ctx.settings) as s:
            live = (
                {
                    str(i)
                    for i in s.scalars(
                        select(File.id).where(File.id.in_([int(d) for d in near] or [-1]), File.kept)
                    )
                }
                if near
                else set()
            )
            near = {d: c for d, c in near.items() if d in live}
            sizes = Counter(near.values())
            near = {d: f"near-{c}" for d, c in near.items() if sizes[c] > 1}
            info = _file_info(s, [int(d) for d in near])
            near_drops = select_keepers(near, lambda d: keep_rank(info[d]))
            _apply_drops(s, near, near_drops, "near_duplicate", info)
        dropped = len(exact_drops) + len(near_drops)
        report.kept = files_in - dropped
        report.reject("file:exact_duplicate", len(exact_drops))
        report.reject("file:near_duplicate", len(near_drops))
        report.details = {
            "files_in": files_in,
            "exact_duplicates": len(exact_drops),
            "near_duplicates": len(near_drops),
            "exact_clusters": len(set(exact_clusters.values())),
            "near_clusters": len(set(near.values())),
            "dedup_ratio": round(dropped / files_in, 4) if files_in else 0.0,
            "minhash": config.slug,
        }
        return report

    part = _partition(ctx, "dedup")
    return run_partition(store, part, work, force=bool(ctx.params.get("force"))).to_dict()


# ---------------------------------------------------------------------------------- publish
def publish_shard(ctx: Any, ref: dict[str, Any]) -> dict[str, Any]:
    """Write the F1 shard of one repository shard's kept files, with its manifest."""
    index, count = int(ref["shard"]), int(ref["num_shards"])
    store = open_store(ctx.settings)

    def work() -> StageReport:
        from scicodepile.store.parquet import read_shard, write_shard

        slug = f1_slug(ctx.settings)
        staging = read_shard(store, _staging_key(ctx, index))
        ids = [int(i) for i in staging.column("file_id").to_pylist()]
        with session_scope(ctx.settings) as s:
            state = {}
            for start in range(0, len(ids), 5000):
                stmt = select(File.id, File.kept, File.dedup_cluster).where(
                    File.id.in_(ids[start : start + 5000])
                )
                state.update({fid: (kept, cluster) for fid, kept, cluster in s.execute(stmt)})
        rows = []
        lang_files: Counter[str] = Counter()
        lang_bytes: Counter[str] = Counter()
        kept_ids = []
        for row in _iter_rows(staging):
            kept, cluster = state.get(int(row["file_id"]), (False, None))
            if not kept:
                continue
            kept_ids.append(int(row.pop("file_id")))
            row["dedup_cluster"] = cluster
            rows.append(row)
            lang_files[row["language"]] += 1
            lang_bytes[row["language"]] += int(row["size"])
        key = shard_key("f1", slug, index)
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
                "provenance": "every row carries repository, commit, path and license",
                "settings": {n: ctx.settings.public_dict()[n] for n in CURATE_SETTINGS},
                "minhash": minhash_config(ctx.settings).slug,
                "created_at": datetime.now(UTC).isoformat(),
            },
        )
        with session_scope(ctx.settings) as s:
            for start in range(0, len(kept_ids), 5000):
                s.execute(
                    update(File).where(File.id.in_(kept_ids[start : start + 5000])).values(shard_key=key)
                )
            upsert(
                s,
                Artifact,
                [
                    {
                        "key": key,
                        "stage": STAGE,
                        "config_slug": slug,
                        "partition": f"{index:05d}-of-{count:05d}",
                        "sha256": manifest["sha256"],
                        "bytes": manifest["bytes"],
                        "rows": manifest["rows"],
                        "validated": None,
                        "validation": {},
                    }
                ],
                keys=["key"],
            )
        report = StageReport(STAGE, kept=len(rows), outputs=[key])
        report.details = {"language_files": dict(lang_files), "language_bytes": dict(lang_bytes)}
        return report

    part = _partition(ctx, "publish", index, count)
    return run_partition(store, part, work, force=bool(ctx.params.get("force"))).to_dict()


def _iter_rows(table: Any) -> Iterator[dict[str, Any]]:
    for batch in table.to_batches(max_chunksize=1000):
        yield from batch.to_pylist()


# ------------------------------------------------------------------------------------- gate
def gate_f1(ctx: Any) -> dict[str, Any]:
    """Run the F1 great-expectations suite; raise QualityGateFailed (naming the expectation) on failure."""
    from scicodepile.errors import QualityGateFailed
    from scicodepile.quality import validate_f1

    store = open_store(ctx.settings)
    slug = f1_slug(ctx.settings)
    keys = [o.key for o in store.list(dataset_prefix("f1", slug) + "/") if o.key.endswith(".parquet")]
    with session_scope(ctx.settings) as s:
        scope = _scope(ctx)
        total = (
            s.scalar(
                select(func.count())
                .select_from(File)
                .where(File.id.in_(scope), (File.kept.is_(True)) | File.rejection_reason.in_(DEDUP_REASONS))
            )
            or 0
        )
        dups = (
            s.scalar(
                select(func.count())
                .select_from(File)
                .where(File.id.in_(scope), File.rejection_reason.in_(DEDUP_REASONS))
            )
            or 0
        )
    ratio = dups / total if total else 0.0
    report = StageReport(STAGE)
    try:
        results = validate_f1(
            store,
            keys,
            languages=_languages(ctx.settings),
            max_bytes=ctx.settings.curate_max_file_bytes,
            duplicate_ratio=ratio,
            max_duplicate_ratio=ctx.settings.curate_max_duplicate_ratio,
        )
        ok, failures = True, []
    except QualityGateFailed as exc:
        ok, failures, results = False, exc.failures, []
        _mark_validated(ctx, keys, False, {"failures": failures})
        raise
    _mark_validated(ctx, keys, ok, {"suites": [r.to_dict() for r in results]})
    report.kept = len(keys)
    report.details = {"gate": "passed", "suites": len(results), "duplicate_ratio": round(ratio, 4)}
    return report.to_dict()


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
    report.rejected = merged.rejected + Counter(dedup.get("rejected", {}))
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
    }
    return report
