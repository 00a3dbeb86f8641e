"""SQLAlchemy 2 models of the application database (not Airflow's metadata database).

Every table has a natural key (GitHub repository id, content sha256, function id, task id ...) with a
unique constraint, so every write is an idempotent upsert (see :mod:`scicodepile.db.upsert`).
Types are portable: the same migrations run on SQLite (embedded mode) and Postgres (production).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


def _created() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), default=utcnow, nullable=False)


def _updated() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow, nullable=False)


# --------------------------------------------------------------------------------------- crawl
class Query(Base):
    """A GitHub search query, expanded from a seed keyword."""

    __tablename__ = "queries"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    text: Mapped[str] = mapped_column(String(256), unique=True, nullable=False)
    seed: Mapped[str | None] = mapped_column(String(256))
    domain: Mapped[str | None] = mapped_column(String(64))
    method: Mapped[str] = mapped_column(String(32), nullable=False, doc="llm | synonym-table | seed")
    model: Mapped[str | None] = mapped_column(String(256))
    prompt_version: Mapped[str | None] = mapped_column(String(64))
    vocabulary_version: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = _created()


class SearchPartition(Base):
    """One (query, date window) slice of GitHub search, small enough to stay under the 1,000 cap."""

    __tablename__ = "search_partitions"
    __table_args__ = (
        UniqueConstraint("query_id", "field", "window_start", "window_end", name="uq_partition_window"),
        Index("ix_search_partitions_status", "status"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    query_id: Mapped[int] = mapped_column(ForeignKey("queries.id", ondelete="CASCADE"), nullable=False)
    field: Mapped[str] = mapped_column(String(16), nullable=False, default="created")
    window_start: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    window_end: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    status: Mapped[str] = mapped_column(
        String(16), nullable=False, default="pending", doc="pending | running | done | failed | split"
    )
    cursor: Mapped[str | None] = mapped_column(Text, doc="next page URL or page number to resume from")
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    total_count: Mapped[int | None] = mapped_column(Integer)
    fetched: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    run_id: Mapped[str | None] = mapped_column(String(128))
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("search_partitions.id"))
    updated_at: Mapped[datetime] = _updated()


class Repository(Base):
    """A candidate repository from any source, with per-stage status and rejection reason."""

    __tablename__ = "repositories"
    __table_args__ = (
        UniqueConstraint("source", "source_id", name="uq_repositories_source_id"),
        Index("ix_repositories_status", "status"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    source: Mapped[str] = mapped_column(String(16), nullable=False, doc="github | sample | local")
    source_id: Mapped[str] = mapped_column(
        String(256), nullable=False, doc="GitHub id, name==version, folder"
    )
    full_name: Mapped[str] = mapped_column(String(512), nullable=False)
    url: Mapped[str | None] = mapped_column(Text)
    description: Mapped[str | None] = mapped_column(Text)
    stars: Mapped[int | None] = mapped_column(Integer, doc="null when unknown, never invented")
    forks: Mapped[int | None] = mapped_column(Integer)
    license: Mapped[str | None] = mapped_column(String(128), doc="SPDX id")
    topics: Mapped[list[Any]] = mapped_column(JSON, nullable=False, default=list)
    language: Mapped[str | None] = mapped_column(String(64))
    is_fork: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    archived: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    size_kb: Mapped[int | None] = mapped_column(Integer)
    default_branch: Mapped[str | None] = mapped_column(String(256))
    created_at_remote: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    pushed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    domain: Mapped[str | None] = mapped_column(String(64))
    queries: Mapped[list[Any]] = mapped_column(JSON, nullable=False, default=list)
    extra: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    status: Mapped[str] = mapped_column(
        String(16), nullable=False, default="candidate", doc="candidate | kept | rejected"
    )
    stage_status: Mapped[dict[str, Any]] = mapped_column(
        JSON, nullable=False, default=dict, doc="{stage: status} for crawl, curate, fetch, ..."
    )
    rejection_stage: Mapped[str | None] = mapped_column(String(32))
    rejection_reason: Mapped[str | None] = mapped_column(String(128))
    needs_recurate: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    first_seen: Mapped[datetime] = _created()
    updated_at: Mapped[datetime] = _updated()


class Snapshot(Base):
    """A repository fetched at a pinned commit, stored once as an archive in the object store."""

    __tablename__ = "snapshots"
    __table_args__ = (UniqueConstraint("repository_id", "commit", name="uq_snapshots_repo_commit"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repository_id: Mapped[int] = mapped_column(
        ForeignKey("repositories.id", ondelete="CASCADE"), nullable=False
    )
    commit: Mapped[str] = mapped_column(String(128), nullable=False)
    archive_key: Mapped[str] = mapped_column(Text, nullable=False)
    sha256: Mapped[str | None] = mapped_column(String(64))
    bytes: Mapped[int | None] = mapped_column(BigInteger)
    file_count: Mapped[int | None] = mapped_column(Integer)
    fetched_at: Mapped[datetime] = _created()


class File(Base):
    """One code file extracted from a snapshot, with its dedup cluster and kept flag."""

    __tablename__ = "files"
    __table_args__ = (
        UniqueConstraint("snapshot_id", "path", name="uq_files_snapshot_path"),
        Index("ix_files_sha256", "sha256"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    snapshot_id: Mapped[int] = mapped_column(ForeignKey("snapshots.id", ondelete="CASCADE"), nullable=False)
    repository_id: Mapped[int] = mapped_column(
        ForeignKey("repositories.id", ondelete="CASCADE"), nullable=False
    )
    path: Mapped[str] = mapped_column(Text, nullable=False)
    sha256: Mapped[str] = mapped_column(String(64), nullable=False, doc="of the normalised content")
    language: Mapped[str | None] = mapped_column(String(32))
    bytes: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    license: Mapped[str | None] = mapped_column(String(128))
    dedup_cluster: Mapped[str | None] = mapped_column(String(64))
    kept: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    rejection_reason: Mapped[str | None] = mapped_column(String(128))
    shard_key: Mapped[str | None] = mapped_column(Text, doc="F1 shard holding the content")


class Function(Base):
    """A function parsed out of a kept file (input to F3 instructions)."""

    __tablename__ = "functions"
    __table_args__ = (UniqueConstraint("function_id", name="uq_functions_function_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    function_id: Mapped[str] = mapped_column(String(64), nullable=False, doc="sha256(file sha, qualname)")
    file_id: Mapped[int] = mapped_column(ForeignKey("files.id", ondelete="CASCADE"), nullable=False)
    qualname: Mapped[str] = mapped_column(Text, nullable=False)
    start_line: Mapped[int] = mapped_column(Integer, nullable=False)
    end_line: Mapped[int] = mapped_column(Integer, nullable=False)
    signature: Mapped[str | None] = mapped_column(Text)
    docstring: Mapped[str | None] = mapped_column(Text)
    code_sha256: Mapped[str] = mapped_column(String(64), nullable=False)


class Annotation(Base):
    """An LLM (or labelled non-LLM) annotation: F2 summary, F3 instruction, F4 pair."""

    __tablename__ = "annotations"
    __table_args__ = (
        UniqueConstraint(
            "kind", "subject_type", "subject_id", "model", "prompt_version", name="uq_annotations_key"
        ),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(8), nullable=False, doc="F2 | F3 | F4")
    subject_type: Mapped[str] = mapped_column(String(16), nullable=False, doc="repository | function")
    subject_id: Mapped[str] = mapped_column(String(128), nullable=False)
    method: Mapped[str] = mapped_column(String(32), nullable=False, doc="llm | docstring | doctest ...")
    model: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    prompt_version: Mapped[str] = mapped_column(String(64), nullable=False, default="")
    cache_key: Mapped[str | None] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    verified: Mapped[bool | None] = mapped_column(Boolean)
    verifier_model: Mapped[str | None] = mapped_column(String(256))
    created_at: Mapped[datetime] = _created()


class LLMCacheEntry(Base):
    """A cached LLM response keyed by (model, prompt version, rendered prompt, parameters)."""

    __tablename__ = "llm_cache"
    cache_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    model: Mapped[str] = mapped_column(String(256), nullable=False)
    prompt_version: Mapped[str] = mapped_column(String(64), nullable=False)
    status: Mapped[str] = mapped_column(String(16), nullable=False, default="ok", doc="ok | rejected")
    response: Mapped[str | None] = mapped_column(Text, doc="inline when small")
    response_key: Mapped[str | None] = mapped_column(Text, doc="object-store key when large")
    parsed: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    completion_tokens: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = _created()


# ----------------------------------------------------------------------------- benchmark, eval
class BenchmarkTask(Base):
    __tablename__ = "benchmark_tasks"
    task_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    version: Mapped[str] = mapped_column(String(64), nullable=False)
    function_id: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), nullable=False, default="candidate")
    rejection_reason: Mapped[str | None] = mapped_column(String(128))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    created_at: Mapped[datetime] = _created()


class Harness(Base):
    __tablename__ = "harnesses"
    __table_args__ = (UniqueConstraint("task_id", "model", "prompt_version", name="uq_harnesses_key"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("benchmark_tasks.task_id", ondelete="CASCADE"))
    model: Mapped[str] = mapped_column(String(256), nullable=False, default="")
    prompt_version: Mapped[str] = mapped_column(String(64), nullable=False, default="")
    code_key: Mapped[str | None] = mapped_column(Text)
    outcome: Mapped[str | None] = mapped_column(String(16))
    details: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)


class EvalRun(Base):
    __tablename__ = "eval_runs"
    __table_args__ = (
        UniqueConstraint("model", "benchmark_version", "kind", "config_slug", name="uq_eval_runs_key"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model: Mapped[str] = mapped_column(String(256), nullable=False)
    benchmark_version: Mapped[str] = mapped_column(String(64), nullable=False)
    kind: Mapped[str] = mapped_column(String(16), nullable=False, doc="pts | fim | exec")
    config_slug: Mapped[str] = mapped_column(String(128), nullable=False)
    status: Mapped[str] = mapped_column(String(16), nullable=False, default="pending")
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    started_at: Mapped[datetime] = _created()
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class EvalSample(Base):
    __tablename__ = "eval_samples"
    __table_args__ = (UniqueConstraint("run_id", "task_id", "sample_index", name="uq_eval_samples_key"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("eval_runs.id", ondelete="CASCADE"), nullable=False)
    task_id: Mapped[str] = mapped_column(String(128), nullable=False)
    sample_index: Mapped[int] = mapped_column(Integer, nullable=False)
    outcome: Mapped[str | None] = mapped_column(String(16))
    score: Mapped[float | None] = mapped_column(Float)
    details: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)


# ------------------------------------------------------------------------- artifacts, rejections
class Artifact(Base):
    """A published object (shard, manifest, bundle) with its checksum and validation result."""

    __tablename__ = "artifacts"
    key: Mapped[str] = mapped_column(String(1024), primary_key=True)
    stage: Mapped[str] = mapped_column(String(32), nullable=False)
    config_slug: Mapped[str | None] = mapped_column(String(128))
    partition: Mapped[str | None] = mapped_column(String(128))
    sha256: Mapped[str] = mapped_column(String(64), nullable=False)
    bytes: Mapped[int] = mapped_column(BigInteger, nullable=False)
    rows: Mapped[int | None] = mapped_column(Integer)
    validated: Mapped[bool | None] = mapped_column(Boolean)
    validation: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    created_at: Mapped[datetime] = _created()


class Rejection(Base):
    """Every rejected item, at any stage, with its reason: nothing is dropped silently."""

    __tablename__ = "rejections"
    __table_args__ = (
        UniqueConstraint("stage", "subject_type", "subject_key", "reason", name="uq_rejections_key"),
        Index("ix_rejections_stage_reason", "stage", "reason"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    stage: Mapped[str] = mapped_column(String(32), nullable=False)
    subject_type: Mapped[str] = mapped_column(String(32), nullable=False)
    subject_key: Mapped[str] = mapped_column(String(1024), nullable=False)
    reason: Mapped[str] = mapped_column(String(128), nullable=False)
    detail: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _created()
