"""A self-contained HTML page of an explanation: the retrieved subgraph as inline SVG
(``graph_svg``) and the anchor, event and context tables.

The page loads nothing (its Content-Security-Policy forbids any fetch and any script) and
every text from the memory goes through ``printable`` and ``html.escape``, so markup in
events is shown, never run. It ends in a rule of colour ``END_RULE``, by which the
screenshot knows it holds the whole page.
"""
from __future__ import annotations

import html
from dataclasses import dataclass

from magma_torch.explain.graph_svg import RING_NOTE, colour, drawn_relations, graph_svg
from magma_torch.explain.printable import escaped, printable
from magma_torch.explain.subgraph import ANCHOR_ORDER, Explanation, event_ref, listing_order, why_no_anchors
from magma_torch.explain.terminal import describe_reason, valid_until

# Page height estimate for the screenshot's first window (a short one is retried taller).
HEADER_PX, TABLE_ROW_PX, HEADINGS_PX, CONTEXT_LINE_PX, CONTEXT_CHAR_PX = 260, 25, 160, 18, 7.5
MIN_WIDTH = 1100
END_RULE = "#5a6b8c"                        # the last thing on the page

# A table is as wide as the page: its text column takes what the other columns leave and ends in "…".
STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:20px 24px;color:#1d2330;background:#fff}
h1{font-size:20px;margin:0 0 6px} h2{font-size:16px;margin:18px 0 6px}
.q{font-size:17px;font-weight:600;margin:0 0 8px} .meta span{margin-right:22px;color:#445}
.bars{display:flex;gap:14px;margin:8px 0 4px} .bar{width:170px}
.bar div{height:10px;background:#e5e8ee;border-radius:3px} .bar div div{background:#4a6fd1}
.bar.top div div{background:#e0861a}
table{border-collapse:collapse;font-size:13px;width:100%}
th,td{padding:3px 8px;border-bottom:1px solid #e3e6ec;text-align:left;white-space:nowrap}
th{background:#f3f5f9} td.num{text-align:right;font-variant-numeric:tabular-nums}
td.text{max-width:0;width:100%;overflow:hidden;text-overflow:ellipsis}
tr:target{background:#fff3c4} tr.out td{color:#8a90a0}
.legend{display:flex;flex-wrap:wrap;gap:4px 18px;font-size:13px;margin:4px 0}
.legend span{white-space:nowrap}
.legend i{display:inline-block;width:22px;height:4px;vertical-align:middle;margin-right:5px}
pre{white-space:pre-wrap;background:#f6f7f9;padding:10px;border-radius:4px;font-size:12.5px}
svg text{font-family:system-ui,sans-serif}
""" + f"footer{{height:4px;margin-top:12px;background:{END_RULE}}}\n"


@dataclass(frozen=True)
class Page:
    html: str
    width: int     # CSS pixels that show the header, the graph and the tables
    height: int    # an estimate of the whole page's


def render_html(ex: Explanation) -> Page:
    graph = graph_svg(ex)
    r = ex.retrieval
    body = [f"<h1>magma-explain: why these events were retrieved</h1><p class=q>{escaped(r.question)}</p>",
            _meta(ex), graph.svg, _legend(ex), _anchor_table(ex), _node_table(ex),
            f"<h2>Context given to the reader ({r.context_tokens} tokens)</h2>"
            f"<pre>{html.escape(printable(r.context, keep_newlines=True))}</pre><footer></footer>"]
    doc = ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
           "<meta http-equiv=Content-Security-Policy content=\"default-src 'none'; style-src 'unsafe-inline'\">"
           f"<title>magma-explain: {escaped(r.question[:80])}</title><style>{STYLE}</style></head>"
           f"<body>{''.join(body)}</body></html>\n")
    width = max(MIN_WIDTH, graph.width + 60)
    per_line = max(1, int((width - 80) / CONTEXT_CHAR_PX))
    context_lines = sum(1 + len(line) // per_line for line in r.context.splitlines())
    height = (HEADER_PX + graph.height + HEADINGS_PX + TABLE_ROW_PX * (len(ex.anchors) + len(ex.nodes) + 2)
              + CONTEXT_LINE_PX * context_lines)
    return Page(doc, width, int(height))


def _meta(ex: Explanation) -> str:
    r = ex.retrieval
    asked = ex.query_time.strftime("%Y-%m-%d %H:%M") if ex.query_time else "not given"
    window = "none" if r.time_window is None else " to ".join(t.strftime("%Y-%m-%d") for t in r.time_window)
    bars = "".join(
        f"<div class='bar{' top' if k == r.intent else ''}'>{k} {p:.2f}<div><div style='width:{100 * p:.1f}%'>"
        f"&nbsp;</div></div></div>" for k, p in r.intent_probs.items())
    return (f"<div class=meta><span>intent: <b>{r.intent}</b></span><span>asked at: {asked}</span>"
            f"<span>time window: {window}</span><span>{len(r.nodes)} events retrieved, {len(ex.nodes)} shown, "
            f"{len(r.context_ids)} in the context</span></div><div class=bars>{bars}</div>")


def _legend(ex: Explanation) -> str:
    items = "".join(f"<span><i style='background:{colour(k)}'></i>{k} edge</span>" for k in drawn_relations(ex))
    return f"<div class=legend>{items}<span>◯ {RING_NOTE}</span></div>"


def _anchor_table(ex: Explanation) -> str:
    r = ex.retrieval
    if not r.anchors:
        return f"<h2>Anchors</h2><p>none: {why_no_anchors(r)}</p>"
    by_id = {n.id: n for n in r.nodes}
    head = "".join(f"<th>{s}</th>" for s in ex.signals)
    rows = []
    for i, a in enumerate(ex.anchors, 1):
        node = by_id[a.id]
        ranks = "".join(f"<td class=num>{a.ranks.get(s, '–')}</td>" for s in ex.signals)
        rows.append(f"<tr><td class=num>{i}</td><td>{escaped(event_ref(node))}</td><td class=num>{a.rrf:.4f}</td>"
                    f"{ranks}<td class=text>{escaped(node.text)}</td></tr>")
    more = len(r.anchors) - len(ex.anchors)
    return (f"<h2>Anchors: reciprocal-rank fusion, {ANCHOR_ORDER} (rank in each ranking; – = not ranked)"
            f"{f', {more} more not shown' if more > 0 else ''}</h2><table><tr><th>#</th><th>event</th>"
            f"<th>fused RRF</th>{head}<th>text</th></tr>{''.join(rows)}</table>")


def _node_table(ex: Explanation) -> str:
    rows = []
    for n in ex.nodes:
        who = f"{n.node.speaker}: " if n.node.speaker else ""
        rows.append(f"<tr id=ev-{n.node.id}{'' if n.in_context else ' class=out'}><td class=num>{n.rank}</td>"
                    f"<td>{escaped(event_ref(n.node))}</td><td>{n.node.timestamp:%Y-%m-%d %H:%M}</td>"
                    f"<td>{escaped(valid_until(ex, n.node))}</td><td class=num>{n.node.score:.3f}</td>"
                    f"<td>{'yes' if n.in_context else 'no'}</td>"
                    f"<td>{escaped(describe_reason(ex, n))}</td><td class=text>{escaped(who + n.node.text)}</td></tr>")
    return (f"<h2>Retrieved events, {listing_order(ex.retrieval)}</h2><table><tr><th>rank</th><th>event</th>"
            "<th>time</th><th>valid until</th><th>score</th><th>in context</th><th>retrieved as</th><th>text</th></tr>"
            f"{''.join(rows)}</table>")
