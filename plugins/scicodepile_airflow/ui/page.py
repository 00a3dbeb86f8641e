"""HTML rendering of :class:`scicodepile.report.CorpusReport` (server-side, no JavaScript needed)."""

from __future__ import annotations

from html import escape
from typing import Any

from scicodepile.report import CorpusReport

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d2733;background:#fff}
h1{font-size:22px;margin:0 0 4px} h2{font-size:16px;margin:22px 0 8px;color:#0b5394}
.sub{color:#5b6b7c;font-size:13px;margin-bottom:12px}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(380px,1fr));gap:8px 28px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{padding:4px 8px;border-bottom:1px solid #e3e8ee;text-align:left}
th{background:#f4f7fa;font-weight:600} td.n{text-align:right;font-variant-numeric:tabular-nums}
.empty{color:#8a97a5;font-style:italic;font-size:13px}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:8px 0}
.card{border:1px solid #dbe3ea;border-radius:8px;padding:10px 14px;min-width:130px}
.card b{display:block;font-size:22px} .card span{color:#5b6b7c;font-size:12px}
.bars{font-size:12px} .bar{display:flex;align-items:center;gap:8px;margin:3px 0}
.bar .label{width:150px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.bar .track{flex:1;background:#eef2f6;border-radius:3px;height:14px}
.bar .fill{background:#3d85c6;height:14px;border-radius:3px} .bar .v{width:70px;text-align:right}
"""


def _bars(items: list[tuple[str, int]], chart_id: str, limit: int = 12) -> str:
    """A horizontal bar chart (plain HTML/CSS): quicker to read than a table for proportions."""
    items = sorted(items, key=lambda kv: -kv[1])[:limit]
    if not items:
        return ""
    top = max(v for _, v in items) or 1
    rows = "".join(
        f'<div class="bar"><span class="label" title="{escape(k)}">{escape(k)}</span>'
        f'<span class="track"><span class="fill" style="display:block;width:{100 * v / top:.1f}%"></span>'
        f'</span><span class="v">{v}</span></div>'
        for k, v in items
    )
    return f'<div class="bars" id="{chart_id}">{rows}</div>'


def _table(rows: list[dict[str, Any]], columns: list[str], table_id: str, empty: str) -> str:
    if not rows:
        return f'<p class="empty" id="{table_id}-empty">{escape(empty)}</p>'
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for c in columns:
            value = row.get(c, "")
            css = ' class="n"' if isinstance(value, int | float) else ""
            cells.append(f"<td{css}>{escape(str(value))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table id="{table_id}"><tr>{head}</tr>{"".join(body)}</table>'


def render_page(report: CorpusReport) -> str:
    """The whole page: headline cards, per-stage counts, domains, languages, rejections, leaderboard."""
    cards = [
        ("repositories found", sum(s.count for s in report.stages if s.item == "repositories found")),
        ("repositories kept", report.count("curate", "repositories kept")),
        ("files kept", report.count("curate", "files kept")),
        ("F1 rows", sum(a["rows"] for a in report.artifacts if a["stage"] in ("curate", "f1"))),
        ("rejections", sum(r["count"] for r in report.rejections)),
        ("dedup ratio", report.dedup.get("dedup_ratio", 0.0)),
    ]
    card_html = "".join(
        f'<div class="card" data-metric="{escape(name)}"><b>{value}</b><span>{escape(name)}</span></div>'
        for name, value in cards
    )
    filters = [
        {**f, "rejected": ", ".join(f"{k} {v}" for k, v in f["rejected"].items()) or "none"}
        for f in report.filters
    ]
    stages = [{"stage": s.stage, "item": s.item, "count": s.count, "detail": s.detail} for s in report.stages]
    domains = report.domains
    domain_cols = ["domain", "total", *sorted({k for d in domains for k in d} - {"domain", "total"})]
    leaderboard = [
        {"model": r["model"], "benchmark": r["benchmark"], "kind": r["kind"]}
        | {k: v for k, v in sorted(r["metrics"].items())}
        for r in report.leaderboard
    ]
    lb_cols = [
        "model",
        "benchmark",
        "kind",
        *sorted({k for r in leaderboard for k in r} - {"model", "benchmark", "kind"}),
    ]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>SciCodePile corpus</title>
<style>{STYLE}</style></head><body>
<h1>SciCodePile corpus</h1>
<div class="sub">Application database: {escape(report.database)}</div>
<div class="cards">{card_html}</div>
<div class="grid">
<section><h2>Per stage</h2>
{_table(stages, ["stage", "item", "count", "detail"], "stages", "No stage has run yet.")}</section>
<section><h2>Rejections by reason</h2>
{_bars([(f"{r['stage']}: {r['reason']}", r["count"]) for r in report.rejections], "rejections-chart")}
{_table(report.rejections, ["stage", "reason", "count"], "rejections", "Nothing rejected.")}</section>
<section><h2>Repositories by domain</h2>
{_table(domains, domain_cols, "domains", "No repositories yet.")}</section>
<section><h2>Kept files by language</h2>
{_bars([(r["language"], r["files"]) for r in report.languages], "languages-chart")}
{_table(report.languages, ["language", "files", "bytes"], "languages", "No kept files yet.")}</section>
<section><h2>Curate filters</h2>
{_table(filters, ["level", "kept", "rejected"], "filters", "Nothing curated yet.")}</section>
<section><h2>Published artifacts</h2>
{_table(report.artifacts, ["stage", "objects", "rows", "bytes", "validated"], "artifacts", "None yet.")}
</section>
<section><h2>Leaderboard</h2>
{_table(leaderboard, lb_cols, "leaderboard", "No evaluation has finished yet.")}</section>
</div></body></html>"""


def render_error(message: str) -> str:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>SciCodePile corpus</title>"
        f"<style>{STYLE}</style></head><body><h1>SciCodePile corpus</h1>"
        f'<p class="empty" id="error">{escape(message)}</p></body></html>'
    )
