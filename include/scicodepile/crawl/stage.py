"""The crawl stage: plan partitions, crawl each one (resumably), merge the reports.

GitHub: every (query, window) is a ``search_partitions`` row with status, attempts, cursor (the next
page's URL, from the ``Link`` header) and last error.  Each page's candidates and the partition's new
cursor are committed in one transaction, so a process killed mid-partition resumes from the page after
the last committed one and finished partitions are never fetched again.  A window over GitHub's result
cap becomes ``split`` and gets child partitions (recursively).  Bad answers (422, malformed JSON,
exhausted retries) fail only their partition, with the reason recorded; the crawl goes on.

``ctx.params``: ``window_start``/``window_end`` (ISO datetimes) crawl only repositories pushed in that
data interval (scheduled incremental runs and backfills).  Failed partitions stay failed on a plain
rerun; ``only_failed`` sets them pending again so they are retried (finished ones are never refetched).
Sample and local sources: one partition per shard of their entries.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select

from scicodepile.crawl.queries import QuerySpec, expand_queries, search_terms
from scicodepile.crawl.store import upsert_repositories
from scicodepile.crawl.windows import Window, parse_instant, split_window
from scicodepile.db import record_rejection, session_scope, upsert
from scicodepile.db.models import Query, Repository, SearchPartition
from scicodepile.pipeline import StageReport
from scicodepile.records import RepositoryRecord
from scicodepile.runner import RunContext
from scicodepile.sources.github import GitHubClient, GitHubError, item_to_record
from scicodepile.text import clean_text

log = logging.getLogger("scicodepile.crawl")

STAGE = "crawl"
_BATCH = 200


# ------------------------------------------------------------------------------------- planning
def crawl_window(ctx: RunContext) -> tuple[str, Window]:
    """The date field and window this run covers: a data interval (pushed) or the full range (created)."""
    params = ctx.params or {}
    if params.get("window_start") and params.get("window_end"):
        return "pushed", Window(parse_instant(params["window_start"]), parse_instant(params["window_end"]))
    start = parse_instant(params.get("since") or ctx.settings.crawl_since)
    if params.get("until"):
        end = parse_instant(params["until"])
    else:  # today at midnight: the same partitions all day, so reruns resume instead of duplicating
        end = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return "created", Window(start, end)


def ensure_queries(ctx: RunContext, report: StageReport | None = None) -> list[tuple[int, QuerySpec]]:
    """Expand the vocabulary (cached by the LLM layer) and upsert the queries; (id, spec) pairs."""
    rejected: list[tuple[str, str, str]] = []
    specs, vocab_version = expand_queries(ctx.settings, on_reject=lambda k, r, d: rejected.append((k, r, d)))
    if ctx.params.get("max_queries"):
        specs = specs[: int(ctx.params["max_queries"])]
    with session_scope(ctx.settings) as s:
        for key, reason, detail in rejected:  # LLM-made text: made storable (NUL, surrogates)
            record_rejection(s, STAGE, "query", clean_text(key, 300), reason, clean_text(detail, 4000))
            if report is not None:
                report.reject(reason)
        upsert(
            s,
            Query,
            [
                {
                    "text": q.text,
                    "seed": q.seed,
                    "domain": q.domain,
                    "method": q.method,
                    "model": q.model,
                    "prompt_version": q.prompt_version,
                    "vocabulary_version": vocab_version,
                }
                for q in specs
            ],
            keys=["text"],
            update=(),
        )
        ids = dict(
            s.execute(select(Query.text, Query.id).where(Query.text.in_([q.text for q in specs]))).all()
        )
    return [(ids[q.text], q) for q in specs]


def _subtree(rows: list[SearchPartition], root_id: int) -> list[SearchPartition]:
    children: dict[int | None, list[SearchPartition]] = {}
    by_id = {r.id: r for r in rows}
    for r in rows:
        children.setdefault(r.parent_id, []).append(r)
    out, stack = [], [by_id[root_id]] if root_id in by_id else []
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(children.get(node.id, []))
    return out


def plan_crawl(ctx: RunContext) -> list[dict[str, Any]]:
    """Create (or load) the run's partitions and return small refs to map over."""
    if ctx.source in ("sample", "local"):
        return [{"kind": ctx.source, "shard": i, "count": ctx.num_shards} for i in range(ctx.num_shards)]
    field, window = crawl_window(ctx)
    queries = ensure_queries(ctx)
    only_failed = bool(ctx.params.get("only_failed"))
    with session_scope(ctx.settings) as s:
        upsert(
            s,
            SearchPartition,
            [
                {
                    "query_id": qid,
                    "field": field,
                    "window_start": window.start,
                    "window_end": window.end,
                    "status": "pending",
                    "attempts": 0,
                    "fetched": 0,
                    "run_id": ctx.run,
                }
                for qid, _ in queries
            ],
            keys=["query_id", "field", "window_start", "window_end"],
            update=(),
        )
        qids = [qid for qid, _ in queries]
        rows = list(
            s.scalars(
                select(SearchPartition).where(
                    SearchPartition.query_id.in_(qids), SearchPartition.field == field
                )
            )
        )
        roots = {
            r.query_id: r
            for r in rows
            if r.parent_id is None
            and parse_instant(r.window_start) == window.start
            and parse_instant(r.window_end) == window.end
        }
        refs: list[dict[str, Any]] = []
        texts = {qid: spec.text for qid, spec in queries}
        for qid in qids:
            root = roots.get(qid)
            if root is None:
                continue
            tree = _subtree(rows, root.id)
            if only_failed:  # failed partitions become pending again (a rerun of this plan still sees them)
                for r in tree:
                    if r.status == "failed":
                        r.status = "pending"
            if not any(r.status in ("pending", "running") for r in tree):
                continue
            refs.append(
                {
                    "kind": "search",
                    "partition_id": root.id,
                    "query": texts[qid],
                    "field": field,
                    "window": [window.start.isoformat(), window.end.isoformat()],
                }
            )
    log.info(
        "crawl plan: %d partitions to crawl (%s window %s .. %s)",
        len(refs),
        field,
        window.start.date(),
        window.end.date(),
    )
    return refs


# ------------------------------------------------------------------------------------- crawling
def _reject(
    ctx: RunContext, report: StageReport, subject_type: str, key: str, reason: str, detail: str
) -> None:
    report.reject(reason)
    with session_scope(ctx.settings) as s:
        record_rejection(s, STAGE, subject_type, clean_text(key, 1000), reason, clean_text(detail, 4000))


def _partition_query(query: str, field: str, window: Window, settings: Any) -> str:
    parts = [search_terms(query), f"stars:>={settings.github_min_stars}"]
    if not settings.github_include_forks:
        parts.append("fork:false")
    parts.append(window.qualifier(field))
    return " ".join(parts)


def _accept_items(
    ctx: RunContext, report: StageReport, items: list[Any], label: str, domain: str | None
) -> list[RepositoryRecord]:
    records: list[RepositoryRecord] = []
    for index, item in enumerate(items):
        try:
            record = item_to_record(item)
        except ValueError as exc:
            name = (item.get("full_name") or item.get("id")) if isinstance(item, dict) else None
            _reject(
                ctx,
                report,
                "search_item",
                clean_text(f"{name or label + '#' + str(index)}", 300),
                str(exc),
                f"item {index} of {label}",
            )
            continue
        record.domain = domain
        records.append(record)
    return records


def _crawl_one(
    ctx: RunContext, client: GitHubClient, part_id: int, query: Query, report: StageReport
) -> list[int]:
    """Crawl one partition from its cursor; returns the ids of child partitions if it was split."""
    settings = ctx.settings
    cap = settings.github_result_cap
    with session_scope(settings) as s:
        part = s.get(SearchPartition, part_id)
        assert part is not None
        part.status, part.attempts = "running", part.attempts + 1
        field, cursor = part.field, part.cursor
        window = Window(parse_instant(part.window_start), parse_instant(part.window_end))
    q = _partition_query(query.text, field, window, settings)
    label = f"{query.text!r} {window.qualifier(field)}"
    url = cursor
    first = cursor is None
    seen: set[str] = set()
    incomplete = 0
    max_pages = -(-cap // settings.github_per_page) + 1
    try:
        while True:
            page = client.search_repositories(q, url=url)
            if page.incomplete:  # GitHub's search timed out: ask again once, then keep what came
                client.forget(page.url)
                page = client.search_repositories(q, url=page.url)
                if page.incomplete:
                    incomplete += 1
                    report.details["incomplete_pages"] = report.details.get("incomplete_pages", 0) + 1
            seen.add(page.url)
            if page.next_url is not None and (page.next_url in seen or len(seen) >= max_pages):
                why = "is a page already fetched" if page.next_url in seen else f"is past {max_pages} pages"
                raise GitHubError(
                    "pagination_loop",
                    f"the Link header's next page {why} (total_count {page.total_count}, cap {cap})",
                )
            records = _accept_items(ctx, report, page.items, label, query.domain)
            if first and page.total_count > cap and len(page.items) < settings.github_per_page:
                raise GitHubError(
                    "inconsistent_total_count",
                    f"total_count {page.total_count} is over the cap but the first page has only "
                    f"{len(page.items)} items: the window cannot be split on such an answer",
                )
            if first and page.total_count > cap:
                sample = [parse_instant(r.pushed_at if field == "pushed" else r.created_at) for r in records]
                pieces = split_window(window, page.total_count, cap, settings.crawl_split_fill, sample)
                if pieces:
                    with session_scope(settings) as s:
                        upsert_repositories(s, records, query.text)
                        upsert(
                            s,
                            SearchPartition,
                            [
                                {
                                    "query_id": query.id,
                                    "field": field,
                                    "window_start": w.start,
                                    "window_end": w.end,
                                    "status": "pending",
                                    "attempts": 0,
                                    "fetched": 0,
                                    "run_id": ctx.run,
                                    "parent_id": part_id,
                                }
                                for w in pieces
                            ],
                            keys=["query_id", "field", "window_start", "window_end"],
                            update=(),
                        )
                        part = s.get(SearchPartition, part_id)
                        part.status, part.total_count, part.cursor = "split", page.total_count, None
                        children = list(
                            s.scalars(select(SearchPartition.id).where(SearchPartition.parent_id == part_id))
                        )
                    report.details["splits"] = report.details.get("splits", 0) + 1
                    return children
                lost = page.total_count - cap
                _reject(
                    ctx,
                    report,
                    "search_partition",
                    label,
                    "cap_exceeded_unsplittable",
                    f"{page.total_count} results in a one-second window; only {cap} are reachable",
                )
                report.details["unreachable_results"] = report.details.get("unreachable_results", 0) + lost
            first = False
            with session_scope(settings) as s:
                report.kept += upsert_repositories(s, records, query.text)
                part = s.get(SearchPartition, part_id)
                part.total_count = page.total_count
                part.fetched += len(page.items)
                part.cursor = page.next_url
                if page.next_url is None:
                    part.status, part.last_error = "done", part.last_error
                    short = min(page.total_count, cap) - part.fetched
                    if incomplete:  # kept what came; failed so that only_failed fetches it whole again
                        part.status, part.cursor = "failed", None
                        part.last_error = (
                            f"incomplete_results: {incomplete} page(s) still incomplete after a retry"
                        )
                        record_rejection(
                            s, STAGE, "search_partition", label, "incomplete_results", part.last_error
                        )
                    elif short > 0:  # total_count is an estimate on GitHub: recorded, not retried
                        record_rejection(
                            s, STAGE, "search_partition", label, "short_of_total_count",
                            f"{part.fetched} items fetched, total_count said {page.total_count}",
                        )  # fmt: skip
            if page.next_url is None:
                if incomplete:
                    report.reject("partition_incomplete_results")
                return []
            url = page.next_url
    except GitHubError as exc:
        log.warning("partition %s failed: %s", label, exc)
        with session_scope(settings) as s:
            part = s.get(SearchPartition, part_id)
            part.status, part.last_error = "failed", str(exc)[:2000]
            record_rejection(s, STAGE, "search_partition", label, exc.reason, str(exc))
        report.reject(f"partition_{exc.reason}")
        return []


def _crawl_search(ctx: RunContext, ref: dict[str, Any], client: GitHubClient) -> StageReport:
    report = StageReport(stage=STAGE)
    start = time.monotonic()
    spent_before = Counter(client.spent)
    with session_scope(ctx.settings) as s:
        root = s.get(SearchPartition, int(ref["partition_id"]))
        if root is None:
            raise ValueError(f"no search partition {ref['partition_id']}")
        query = s.get(Query, root.query_id)
        s.expunge(query)
    statuses: Counter[str] = Counter()
    stack = [int(ref["partition_id"])]
    while stack:
        part_id = stack.pop()
        with session_scope(ctx.settings) as s:
            part = s.get(SearchPartition, part_id)
            status = part.status
            kids = list(
                s.scalars(
                    select(SearchPartition.id)
                    .where(SearchPartition.parent_id == part_id)
                    .order_by(SearchPartition.window_start.desc())
                )
            )
        if status in ("pending", "running"):
            children = _crawl_one(ctx, client, part_id, query, report)
            if children:
                statuses["split"] += 1
                with session_scope(ctx.settings) as s:
                    kids = list(
                        s.scalars(
                            select(SearchPartition.id)
                            .where(SearchPartition.parent_id == part_id)
                            .order_by(SearchPartition.window_start.desc())
                        )
                    )
                stack.extend(kids)
            else:
                with session_scope(ctx.settings) as s:
                    statuses[s.get(SearchPartition, part_id).status] += 1
        elif status == "split":
            stack.extend(kids)
    report.details["partitions"] = dict(statuses)
    report.details["api_calls"] = dict(Counter(client.spent) - spent_before)
    report.seconds = time.monotonic() - start
    return report


def _crawl_source_shard(ctx: RunContext, ref: dict[str, Any]) -> StageReport:
    from scicodepile.sources import get_source

    report = StageReport(stage=STAGE)
    start = time.monotonic()
    source = get_source(ref["kind"], ctx)
    batch: list[RepositoryRecord] = []

    def on_reject(key: str, reason: str, detail: str) -> None:
        _reject(ctx, report, f"{ref['kind']}_entry", key, reason, detail)

    def flush() -> None:
        with session_scope(ctx.settings) as s:
            report.kept += upsert_repositories(s, batch, None)
        batch.clear()

    for record in source.discover(int(ref["shard"]), int(ref["count"]), ctx.limit, on_reject=on_reject):
        batch.append(record)
        if len(batch) >= _BATCH:
            flush()
    flush()
    report.seconds = time.monotonic() - start
    return report


def crawl_partition(
    ctx: RunContext, ref: dict[str, Any], client: GitHubClient | None = None
) -> dict[str, Any]:
    """Crawl one ref from :func:`plan_crawl`: a search partition tree, or a shard of sample/local."""
    if ref.get("kind") != "search":
        return _crawl_source_shard(ctx, ref).to_dict()
    own = client is None
    client = client or GitHubClient(ctx.settings)
    try:
        if own:
            client.prime()
        report = _crawl_search(ctx, ref, client)
        report.details["rate_budget"] = client.budget()
        return report.to_dict()
    finally:
        if own:
            client.close()


def finish_crawl(ctx: RunContext, reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge the partition reports and add totals: candidates per source, partitions by status, API spend."""
    merged = StageReport(stage=STAGE)
    budget: dict[str, Any] = {}
    for data in reports:
        part = StageReport.from_dict(STAGE, data)
        budget.update(part.details.pop("rate_budget", {}) or {})
        merged.merge(part)
    with session_scope(ctx.settings) as s:
        merged.details["candidates"] = int(
            s.scalar(select(func.count()).select_from(Repository).where(Repository.source == ctx.source)) or 0
        )
        if ctx.source == "github":
            merged.details["partition_status"] = dict(
                s.execute(
                    select(SearchPartition.status, func.count())
                    .where(SearchPartition.run_id == ctx.run)
                    .group_by(SearchPartition.status)
                ).all()
            )
    if budget:
        merged.details["rate_budget"] = budget
    merged.details.setdefault("api_calls", {})
    return merged.to_dict()


def run_crawl_stage(ctx: RunContext) -> StageReport:
    """Plan, crawl every partition in order, and finish: the CLI's (and tests') whole crawl."""
    start = time.monotonic()
    refs = plan_crawl(ctx)
    client = GitHubClient(ctx.settings) if ctx.source == "github" else None
    reports: list[dict[str, Any]] = []
    try:
        if client is not None:
            client.prime()
        for ref in refs:
            data = crawl_partition(ctx, ref, client)
            if client is not None:
                data.setdefault("details", {})["rate_budget"] = client.budget()
            reports.append(data)
    finally:
        if client is not None:
            client.close()
    report = StageReport.from_dict(STAGE, finish_crawl(ctx, reports))
    report.seconds = time.monotonic() - start
    if ctx.source == "github":
        report.details["method"] = "github-search"
    return report
