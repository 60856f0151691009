"""A self-contained HTML page of an explanation: the retrieved subgraph as inline SVG and
the anchor, event and context tables.

Layout: one column per shown event in time order, one row per beam-search depth (anchors
on top), each event drawn with its salience rank and joined to the event the beam search
reached it from by an arrow coloured by relation. The page loads nothing (its
Content-Security-Policy forbids any fetch and any script) and every text from the memory
goes through ``printable`` and ``html.escape``, so markup in events is shown, never run.
"""
from __future__ import annotations

import html
from dataclasses import dataclass

from magma_torch.explain.printable import printable
from magma_torch.explain.subgraph import Explanation, ShownNode, event_ref, split_relation
from magma_torch.explain.terminal import describe_reason

RELATION_COLOURS = {"temporal": "#1f77b4", "semantic": "#2ca02c", "causal": "#d62728", "entity": "#9467bd",
                    "episode": "#ff7f0e"}
ANCHOR_FILL, EVENT_FILL = "#ffc94d", "#dbe6f6"
COL, ROW, RADIUS = 46, 112, 15              # px per event column, per depth row; node radius
GUTTER, TOP, LABELS = 118, 36, 120          # left row labels, space above, room for rotated labels
HEADER_PX, TABLE_ROW_PX = 260, 25           # page height estimates for the screenshot window
MIN_WIDTH = 1100

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:20px 24px;color:#1d2330;background:#fff}
h1{font-size:20px;margin:0 0 6px} h2{font-size:16px;margin:18px 0 6px}
.q{font-size:17px;font-weight:600;margin:0 0 8px} .meta span{margin-right:22px;color:#445}
.bars{display:flex;gap:14px;margin:8px 0 4px} .bar{width:170px}
.bar div{height:10px;background:#e5e8ee;border-radius:3px} .bar div div{background:#4a6fd1}
.bar.top div div{background:#e0861a}
table{border-collapse:collapse;font-size:13px} th,td{padding:3px 8px;border-bottom:1px solid #e3e6ec;text-align:left}
th{background:#f3f5f9} td.num{text-align:right;font-variant-numeric:tabular-nums}
td.text{max-width:460px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
tr:target{background:#fff3c4} tr.out td{color:#8a90a0}
.legend{display:flex;flex-wrap:wrap;gap:4px 18px;font-size:13px;margin:4px 0}
.legend span{white-space:nowrap}
.legend i{display:inline-block;width:22px;height:4px;vertical-align:middle;margin-right:5px}
pre{white-space:pre-wrap;background:#f6f7f9;padding:10px;border-radius:4px;font-size:12.5px}
svg text{font-family:system-ui,sans-serif}
"""


@dataclass(frozen=True)
class Page:
    html: str
    width: int     # CSS pixels that show the header, the graph and the anchor table
    height: int


def render_html(ex: Explanation) -> Page:
    svg, svg_w, svg_h = _svg(ex)
    r = ex.retrieval
    body = [f"<h1>magma-explain: why these events were retrieved</h1><p class=q>{_e(r.question)}</p>",
            _meta(ex), svg, _legend(), _anchor_table(ex), _node_table(ex),
            f"<h2>Context given to the reader ({r.context_tokens} tokens)</h2>"
            f"<pre>{html.escape(printable(r.context, keep_newlines=True))}</pre>"]
    doc = ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
           "<meta http-equiv=Content-Security-Policy content=\"default-src 'none'; style-src 'unsafe-inline'\">"
           f"<title>magma-explain: {_e(r.question[:80])}</title><style>{STYLE}</style></head>"
           f"<body>{''.join(body)}</body></html>\n")
    height = HEADER_PX + svg_h + TABLE_ROW_PX * (len(ex.anchors) + 3)
    return Page(doc, max(MIN_WIDTH, svg_w + 60), height)


def _e(text: str) -> str:
    return html.escape(printable(text), quote=True)


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


def _layout(ex: Explanation) -> dict[int, tuple[float, float]]:
    order = sorted(ex.nodes, key=lambda n: (n.node.timestamp, n.node.id))
    return {n.node.id: (GUTTER + COL * (i + 0.5), TOP + RADIUS + ROW * n.depth) for i, n in enumerate(order)}


def _el(tag: str, inner: str = "", **attrs) -> str:
    """An SVG element with every attribute quoted and escaped (``stroke_width`` -> ``stroke-width``)."""
    a = "".join(f' {k.replace("_", "-")}="{html.escape(str(v), quote=True)}"' for k, v in attrs.items())
    return f"<{tag}{a}>{inner}</{tag}>"


def _svg(ex: Explanation) -> tuple[str, int, int]:
    pos = _layout(ex)
    depth = max((n.depth for n in ex.nodes), default=0)
    bottom = TOP + RADIUS + ROW * depth + RADIUS
    width, height = GUTTER + COL * len(ex.nodes) + LABELS, bottom + LABELS   # rotated labels reach right and down
    markers = "".join(_el("marker", _el("path", d="M0,0L10,5L0,10z", fill=c), id=f"arrow-{k}",
                          viewBox="0 0 10 10", refX=9, refY=5, markerWidth=7, markerHeight=7, orient="auto")
                      for k, c in RELATION_COLOURS.items())
    parts = [_el("defs", markers)]
    for d in range(depth + 1):
        y = TOP + RADIUS + ROW * d
        parts.append(_el("line", x1=GUTTER - 8, y1=y, x2=width - 10, y2=y, stroke="#eef0f4")
                     + _el("text", f"depth {d}" if d else "anchors" if ex.retrieval.anchors else "events", x=6, y=y + 4, font_size=12, fill="#667"))
    parts += [_edge(n, pos) for n in ex.nodes if n.reached_by is not None]
    parts += [_node(ex, n, pos, bottom) for n in ex.nodes]
    svg = _el("svg", "".join(parts), xmlns="http://www.w3.org/2000/svg", width=width, height=height, role="img",
              aria_label="retrieved subgraph")
    return svg, width, height


def _edge(n: ShownNode, pos) -> str:
    e = n.reached_by
    kind, entity = split_relation(e.relation)
    colour = RELATION_COLOURS.get(kind, "#777")
    (x1, y1), (x2, y2) = pos[e.src], pos[e.dst]
    y1, y2, mid = y1 + RADIUS, y2 - RADIUS - 2, (y1 + y2) / 2
    curve = _el("path", d=f"M{x1:.1f},{y1:.1f} C{x1:.1f},{mid:.1f} {x2:.1f},{mid:.1f} {x2:.1f},{y2:.1f}",
                fill="none", stroke=colour, stroke_width=2,
                marker_end=f"url(#arrow-{kind if kind in RELATION_COLOURS else 'semantic'})")
    # named next to the arrowhead: edges from one anchor fan out there, so the names do not overlap
    label = _el("text", _e(entity), x=f"{x2:.1f}", y=f"{y2 - 12:.1f}", font_size=11,
                text_anchor="middle", fill=colour, stroke="#fff", stroke_width=3, paint_order="stroke") if entity else ""
    return _el("g", _el("title", _e(f"{e.relation} edge, score {e.score:.3f}")) + curve + label)


def _node(ex: Explanation, n: ShownNode, pos, bottom: float) -> str:
    x, y = pos[n.node.id]
    ring = ({"stroke": "#1d2330", "stroke_width": 2} if n.in_context
            else {"stroke": "#9aa1b0", "stroke_dasharray": "3 2"})
    who = f"{n.node.speaker}: " if n.node.speaker else ""
    tip = f"#{n.rank} {event_ref(n.node)} — {describe_reason(ex, n)}\n{who}{n.node.text}"
    label = f"{event_ref(n.node)} · {n.node.timestamp:%Y-%m-%d}"
    inner = (_el("title", html.escape(printable(tip, keep_newlines=True)))
             + _el("line", x1=x, y1=y + RADIUS, x2=x, y2=bottom + 4, stroke="#d5d9e2", stroke_dasharray="2 3")
             + _el("circle", cx=x, cy=y, r=RADIUS, fill=ANCHOR_FILL if n.anchor_rank is not None else EVENT_FILL,
                   **ring)
             + _el("text", str(n.rank), x=x, y=y + 4, font_size=11, font_weight=600, text_anchor="middle")
             + _el("text", _e(label), x=x, y=bottom + 10, font_size=11, fill="#445",
                   transform=f"rotate(50 {x:.1f} {bottom + 10:.1f})"))
    return _el("a", _el("g", inner), href=f"#ev-{n.node.id}")


def _legend() -> str:
    items = "".join(f"<span><i style='background:{c}'></i>{k} edge</span>" for k, c in RELATION_COLOURS.items())
    return (f"<div class=legend>{items}<span>◯ number = salience rank; gold = anchor; "
            f"solid ring = in the context, dashed = retrieved but cut by the token budget</span></div>")


def _anchor_table(ex: Explanation) -> str:
    r = ex.retrieval
    if not r.anchors:
        return "<h2>Anchors</h2><p>none: this memory does not rank events</p>"
    by_id = {n.id: n for n in r.nodes}
    head = "".join(f"<th>{s}</th>" for s in ex.signals)
    rows = []
    for i, a in enumerate(ex.anchors, 1):
        node = by_id[a.id]
        ranks = "".join(f"<td class=num>{a.ranks.get(s, '–')}</td>" for s in ex.signals)
        rows.append(f"<tr><td class=num>{i}</td><td>{_e(event_ref(node))}</td><td class=num>{a.rrf:.4f}</td>"
                    f"{ranks}<td class=text>{_e(node.text)}</td></tr>")
    more = len(r.anchors) - len(ex.anchors)
    return (f"<h2>Anchors: reciprocal-rank fusion (rank in each ranking; – = not ranked)"
            f"{f', {more} more not shown' if more > 0 else ''}</h2><table><tr><th>#</th><th>event</th>"
            f"<th>fused RRF</th>{head}<th>text</th></tr>{''.join(rows)}</table>")


def _node_table(ex: Explanation) -> str:
    rows = []
    for n in ex.nodes:
        who = f"{n.node.speaker}: " if n.node.speaker else ""
        rows.append(f"<tr id=ev-{n.node.id}{'' if n.in_context else ' class=out'}><td class=num>{n.rank}</td>"
                    f"<td>{_e(event_ref(n.node))}</td><td>{n.node.timestamp:%Y-%m-%d %H:%M}</td>"
                    f"<td class=num>{n.node.score:.3f}</td><td>{'yes' if n.in_context else 'no'}</td>"
                    f"<td>{_e(describe_reason(ex, n))}</td><td class=text>{_e(who + n.node.text)}</td></tr>")
    return ("<h2>Retrieved events by salience</h2><table><tr><th>rank</th><th>event</th><th>time</th>"
            f"<th>score</th><th>in context</th><th>retrieved as</th><th>text</th></tr>{''.join(rows)}</table>")
