"""Typed settings for the whole platform.

One object, read from the environment (prefix ``SCICODEPILE_``) or a ``.env`` file, with embedded
defaults that need no server: a SQLite file and a local folder under ``./var/``.  Production values
point at Postgres, MinIO and TGI.  Secrets are ``SecretStr`` so they never show in logs or reprs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from scicodepile.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The repository root (``include/scicodepile`` is two levels below it)."""

DATA_DIR = REPO_ROOT / "include" / "data"
"""Versioned data shipped with the library: vocabulary, manifests, language table."""


class Settings(BaseSettings):
    """All tunables.  Field ``foo`` is set by the environment variable ``SCICODEPILE_FOO``."""

    model_config = SettingsConfigDict(
        env_prefix="SCICODEPILE_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        validate_default=True,
    )

    # -- where things live ------------------------------------------------------------------
    var_dir: Path = Field(
        default=REPO_ROOT / "var",
        description="Working folder for embedded mode: SQLite file, local object store, caches.",
    )
    database_url: str = Field(
        default="",
        description="SQLAlchemy URL of the application database; empty means SQLite under var_dir.",
    )

    # -- object store -----------------------------------------------------------------------
    store_backend: Literal["local", "s3"] = "local"
    store_root: Path | None = Field(
        default=None, description="Folder of the local object store; empty means var_dir/objects."
    )
    s3_endpoint: str = Field(default="127.0.0.1:9000", description="host:port of the S3 server.")
    s3_access_key: SecretStr = SecretStr("")
    s3_secret_key: SecretStr = SecretStr("")
    s3_bucket: str = "scicodepile"
    s3_secure: bool = False
    s3_region: str | None = None
    s3_create_bucket: bool = Field(
        default=False,
        description="Create the bucket when it is missing (tests, first deployment) instead of failing.",
    )

    # -- LLM layer (issue: LLM) ------------------------------------------------------------
    # (fields of the LLM layer go here)
    llm_endpoints: str = Field(
        default="",
        description="Comma-separated base URLs of TGI (or OpenAI-compatible) servers serving llm_model; "
        "empty means no LLM: stages use their labelled non-LLM fallbacks.",
    )
    llm_model: str = Field(default="", description="Model id; empty means the id the server reports.")
    llm_api: Literal["tgi", "openai"] = Field(
        default="tgi", description="tgi: POST /generate with grammar; openai: POST /v1/chat/completions."
    )
    llm_api_key: SecretStr = Field(default=SecretStr(""), description="Bearer token if the server needs one.")
    llm_judge_endpoints: str = Field(default="", description="Judge endpoints; empty = llm_endpoints.")
    llm_judge_model: str = Field(default="", description="Judge model id; empty = the judge server's model.")
    llm_judge_api: Literal["", "tgi", "openai"] = Field(default="", description="Empty = llm_api.")
    llm_max_concurrency: int = Field(
        default=16, ge=1, le=1024, description="Per process and endpoint; also capped by the server's /info."
    )
    llm_request_timeout_s: float = Field(default=120.0, gt=0, description="One HTTP request.")
    llm_deadline_s: float = Field(default=600.0, gt=0, description="One call, all retries and re-asks.")
    llm_max_retries: int = Field(default=8, ge=0, le=100, description="Per request: 429/503/timeouts/drops.")
    llm_backoff_base_s: float = Field(default=0.5, ge=0)
    llm_backoff_max_s: float = Field(default=30.0, ge=0)
    llm_max_reasks: int = Field(default=2, ge=0, le=10, description="Re-asks after an invalid answer.")
    llm_temperature: float = Field(default=0.0, ge=0)
    llm_cache: bool = Field(default=True, description="Read and write the llm_cache table.")
    llm_cache_inline_bytes: int = Field(
        default=16384, ge=0, description="Larger answers go to the object store (store/keys.llm_payload_key)."
    )

    # -- sandbox (issue: sandbox) ---------------------------------------------------------------
    # (fields of the sandbox go here)
    sandbox_backend: Literal["bwrap", "docker"] = Field(
        default="bwrap", description="bwrap (bubblewrap, the default) or docker (needs a Docker engine)."
    )
    sandbox_env_root: Path = Field(
        default=Path("/opt/scicodepile"),
        description="Where scripts/sandbox-env.sh builds sandbox-venv-<hash>: world-readable, outside /root.",
    )
    sandbox_python_env: Path | None = Field(
        default=None, description="The sandbox's venv; empty means sandbox_env_root/sandbox-venv-<hash>."
    )
    sandbox_timeout_s: float = Field(default=10.0, gt=0, le=3600, description="Default wall-clock limit.")
    sandbox_memory_mb: int = Field(default=2048, ge=64, description="Address-space limit (RLIMIT_AS).")
    sandbox_max_processes: int = Field(default=64, ge=4, description="Processes and threads (RLIMIT_NPROC).")
    sandbox_tmp_mb: int = Field(default=64, ge=1, description="Size of the private writable /tmp.")
    sandbox_tmp_inodes: int = Field(
        default=32768, ge=64, description="Files and folders the private /tmp and /dev/shm may hold together."
    )
    sandbox_file_size_mb: int = Field(default=32, ge=1, description="Largest file written (RLIMIT_FSIZE).")
    sandbox_open_files: int = Field(default=256, ge=16, description="Open descriptors (RLIMIT_NOFILE).")
    sandbox_max_output_bytes: int = Field(
        default=4 << 20, ge=1024, description="stdout+stderr bytes after which the run is killed (flood)."
    )
    sandbox_tail_bytes: int = Field(default=16384, ge=256, description="Bytes of each stream kept.")
    sandbox_workers: int = Field(default=0, ge=0, description="Batch workers; 0 means one per CPU core.")
    sandbox_uid_base: int = Field(
        default=3_000_000, ge=1000, description="First host uid leased to sandboxes (one uid per live run)."
    )
    sandbox_uid_slots: int = Field(default=256, ge=1, le=65536)
    sandbox_docker_image: str = Field(
        default="scicodepile/sandbox:py3.11",
        description="Image for the docker backend: Python 3.11 with include/data/sandbox-requirements.txt.",
    )

    # -- crawl and sources (issue: crawl) -------------------------------------------------------
    github_token: SecretStr = SecretStr("")
    github_api_url: str = "https://api.github.com"
    github_min_stars: int = Field(default=10, ge=0, description="search qualifier stars:>=N")
    github_include_forks: bool = Field(default=False, description="false adds the qualifier fork:false")
    github_per_page: int = Field(default=100, ge=1, le=100)
    github_result_cap: int = Field(default=1000, ge=1, description="GitHub returns at most this many")
    github_max_retries: int = Field(default=8, ge=0, description="per request: 5xx, secondary limits")
    github_backoff_s: float = Field(default=1.0, ge=0, description="base of exponential 5xx backoff")
    github_rate_margin_s: float = Field(
        default=1.0, ge=0, description="extra wait after X-RateLimit-Reset (clock skew between us and GitHub)"
    )
    github_secondary_wait_s: float = Field(
        default=60.0, ge=0, description="wait after a secondary limit without Retry-After (GitHub: >= 60 s)"
    )
    github_timeout_s: float = Field(default=30.0, gt=0)
    github_graphql_batch: int = Field(default=40, ge=1, le=100, description="repositories per GraphQL query")
    crawl_since: str = Field(default="2008-01-01", description="start of the full crawl's created: window")
    crawl_max_queries: int = Field(default=250, ge=1, description="cap on expanded search queries")
    crawl_split_fill: float = Field(
        default=0.75, gt=0.1, le=1.0, description="target share of the result cap per split sub-window"
    )
    crawl_vocabulary: Path = Field(default=DATA_DIR / "seed_vocabulary.json")
    crawl_synonyms: Path = Field(default=DATA_DIR / "synonyms.json")
    sample_manifest: Path = Field(
        default=DATA_DIR / "sample_manifest.txt", description="one name==version a line, # comments"
    )
    sample_pip_timeout_s: float = Field(default=300.0, gt=0)

    # -- curate (issue: curate) -----------------------------------------------------------------
    curate_min_stars: int = Field(
        default=10, ge=0, description="Repositories below this many stars are rejected; unknown skips."
    )
    curate_languages: str = Field(
        default="Python,C,C++,Fortran,Julia,R,MATLAB,Rust,Cython,CUDA",
        description="Comma-separated target languages (names from include/data/languages.json).",
    )
    curate_min_code_share: float = Field(
        default=0.1, ge=0.0, le=1.0, description="Below this share of code bytes a repo is docs-only."
    )
    curate_license_policy: Literal["permissive", "permissive+copyleft", "any"] = "permissive"
    curate_optout_file: Path = Field(
        default=DATA_DIR / "optout.txt",
        description="Repositories ('owner/name') and owners ('owner' or 'owner/*') removed on every run.",
    )
    curate_max_archive_bytes: int = Field(default=512 * 1024 * 1024, ge=1)
    curate_max_archive_files: int = Field(default=50_000, ge=1)
    curate_max_compression_ratio: float = Field(default=200.0, ge=1.0)
    curate_max_file_bytes: int = Field(default=1_000_000, ge=1, description="Per-file size cap.")
    curate_max_line_length: int = Field(default=1000, ge=1)
    curate_max_mean_line_length: float = Field(default=100.0, gt=0)
    curate_min_alnum_fraction: float = Field(default=0.25, ge=0.0, le=1.0)
    curate_readme_max_chars: int = Field(default=12_000, ge=100)
    curate_redact: bool = True
    curate_max_duplicate_ratio: float = Field(
        default=0.9, ge=0.0, le=1.0, description="Quality gate: share of files removed as duplicates."
    )

    # -- dedup (issue: curate/dedup) ------------------------------------------------------------
    # MinHash LSH near-dedup, The Stack v2 defaults; validated together by curate.dedup.MinhashConfig.
    dedup_ngram: int = Field(default=5, ge=1, description="Tokens per shingle.")
    dedup_num_perm: int = Field(default=250, ge=1, description="MinHash permutations (= bands * rows).")
    dedup_bands: int = Field(default=25, ge=1, description="LSH bands.")
    dedup_rows: int = Field(default=10, ge=1, description="MinHash values per band.")
    dedup_threshold: float = Field(default=0.7, gt=0, lt=1, description="Target Jaccard similarity.")
    dedup_seed: int = Field(default=1, ge=0, description="Seed of the hash functions (same on all workers).")
    dedup_memory_budget_mb: int = Field(
        default=512, ge=1, description="Working memory of the LSH index per band partition (MiB)."
    )
    dedup_verify: bool = Field(
        default=True,
        description="Join an LSH candidate pair only if the full signatures estimate Jaccard >= threshold.",
    )

    # -- orchestration (issue: orchestration) -------------------------------------------------
    # (orchestration fields go here)
    default_source: Literal["sample", "local", "github"] = Field(
        default="sample",
        description="Source of DAG runs whose params name none (scheduled crawls): github in production.",
    )

    # -- run shape --------------------------------------------------------------------------
    num_shards: int = Field(default=4, ge=1, le=4096)
    log_level: str = "INFO"

    @field_validator("database_url")
    @classmethod
    def _strip(cls, value: str) -> str:
        return value.strip()

    def __repr_args__(self):  # type: ignore[override]  # the database URL may embed a password
        for name, value in super().__repr_args__():
            yield name, redact_url(value) if name == "database_url" and value else value

    # -- derived values ---------------------------------------------------------------------
    @property
    def resolved_database_url(self) -> str:
        """The database URL, defaulting to a SQLite file in ``var_dir``."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.var_dir / 'scicodepile.db').resolve()}"

    @property
    def resolved_store_root(self) -> Path:
        return (self.store_root or self.var_dir / "objects").resolve()

    def public_dict(self) -> dict[str, object]:
        """Settings as a plain dict with every secret masked: safe for logs and manifests."""
        data = self.model_dump(mode="json")
        for name, field in type(self).model_fields.items():
            if field.annotation is SecretStr or "SecretStr" in str(field.annotation):
                data[name] = "**********" if getattr(self, name).get_secret_value() else ""
        data["database_url"] = redact_url(self.resolved_database_url)
        return data

    def slug(self, *names: str) -> str:
        """A short deterministic hash of the named fields, for output keys."""
        payload = json.dumps({n: str(getattr(self, n)) for n in names}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:10]


def redact_url(url: str) -> str:
    """Hide the password of a database or service URL (``user:***@host``)."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment, turning validation errors into one clear line."""
    from pydantic import ValidationError

    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]) if first.get("loc") else "?"
        raise ConfigError(
            f"invalid setting {name}: {first['msg']}", setting=f"SCICODEPILE_{name.upper()}"
        ) from None
