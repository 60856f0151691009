"""The retrieved subgraph as SVG: in the HTML page, and on its own as a figure (``--svg``).

Layout: one column per shown event in time order, one row per beam-search depth (anchors
on top), each event drawn with its salience rank and joined to the event the beam search
reached it from by an arrow coloured by relation. Every text from the memory goes through
``printable`` and is escaped, so markup in events is drawn as text, never run.
"""
from __future__ import annotations

import html
from dataclasses import dataclass

from magma_torch.explain.printable import escaped, printable
from magma_torch.explain.subgraph import Explanation, ShownNode, event_ref
from magma_torch.explain.terminal import describe_reason

RELATION_COLOURS = {"temporal": "#1f77b4", "semantic": "#2ca02c", "causal": "#d62728", "entity": "#9467bd",
                    "episode": "#ff7f0e"}
OTHER_COLOUR = "#777"
ANCHOR_FILL, EVENT_FILL = "#ffc94d", "#dbe6f6"
COL, ROW, RADIUS = 46, 112, 15              # px per event column, per depth row; node radius
GUTTER, TOP, LABELS = 118, 36, 120          # left row labels, space above, room for rotated labels
LEGEND_ROW = 22                             # px per legend line of the stand-alone figure
MIN_FIGURE_WIDTH = 720                      # room for the legend's note
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
RING_NOTE = "number = salience rank; gold = anchor; solid ring = in the context, dashed = cut by the token budget"


@dataclass(frozen=True)
class Figure:
    svg: str
    width: int     # px
    height: int


def drawn_relations(ex: Explanation) -> list[str]:
    """The relation kinds of the drawn edges, in legend order."""
    kinds = {ex.hop(e.relation)[0] for e in ex.edges}
    return [k for k in RELATION_COLOURS if k in kinds] + sorted(kinds - RELATION_COLOURS.keys())


def colour(kind: str) -> str:
    return RELATION_COLOURS.get(kind, OTHER_COLOUR)


def graph_svg(ex: Explanation, standalone: bool = False) -> Figure:
    """The subgraph; ``standalone``: a complete SVG file (XML declaration, white background, its
    own fonts and a legend of the drawn edge types) fit to drop into a paper, without the page's
    links to its tables."""
    pos = _layout(ex)
    depth = max((n.depth for n in ex.nodes), default=0)
    bottom = TOP + RADIUS + ROW * depth + RADIUS
    width, height = GUTTER + COL * len(ex.nodes) + LABELS, bottom + LABELS   # rotated labels reach right and down
    kinds = drawn_relations(ex)
    markers = "".join(_el("marker", _el("path", d="M0,0L10,5L0,10z", fill=colour(k)), id=f"arrow-{k}",
                          viewBox="0 0 10 10", refX=9, refY=5, markerWidth=7, markerHeight=7, orient="auto")
                      for k in kinds)
    parts = [_el("defs", markers)]
    for d in range(depth + 1):
        y = TOP + RADIUS + ROW * d
        parts.append(_el("line", x1=GUTTER - 8, y1=y, x2=width - 10, y2=y, stroke="#eef0f4")
                     + _el("text", f"depth {d}" if d else "anchors" if ex.retrieval.anchors else "events", x=6,
                           y=y + 4, font_size=12, fill="#667"))
    parts += [_edge(ex, n, pos) for n in ex.nodes if n.reached_by is not None]
    parts += [_node(ex, n, pos, bottom, link=not standalone) for n in ex.nodes]
    attrs = {"xmlns": "http://www.w3.org/2000/svg", "role": "img", "aria_label": "retrieved subgraph"}
    if not standalone:
        return Figure(_el("svg", "".join(parts), width=width, height=height, **attrs), width, height)
    legend, legend_h = _svg_legend(kinds, height)
    width, height = max(width, MIN_FIGURE_WIDTH), height + legend_h
    body = _el("rect", width="100%", height="100%", fill="#fff") + "".join(parts) + legend
    svg = _el("svg", body, width=width, height=height, viewBox=f"0 0 {width} {height}", font_family=FONT, **attrs)
    return Figure('<?xml version="1.0" encoding="UTF-8"?>\n' + svg + "\n", width, height)


def _layout(ex: Explanation) -> dict[int, tuple[float, float]]:
    order = sorted(ex.nodes, key=lambda n: (n.node.timestamp, n.node.id))
    return {n.node.id: (GUTTER + COL * (i + 0.5), TOP + RADIUS + ROW * n.depth) for i, n in enumerate(order)}


def _el(tag: str, inner: str = "", **attrs) -> str:
    """An SVG element with every attribute quoted and escaped (``stroke_width`` -> ``stroke-width``)."""
    a = "".join(f' {k.replace("_", "-")}="{html.escape(str(v), quote=True)}"' for k, v in attrs.items())
    return f"<{tag}{a}>{inner}</{tag}>"


def _edge(ex: Explanation, n: ShownNode, pos) -> str:
    e = n.reached_by
    kind, name = ex.hop(e.relation)
    c = colour(kind)
    (x1, y1), (x2, y2) = pos[e.src], pos[e.dst]
    y1, y2, mid = y1 + RADIUS, y2 - RADIUS - 2, (y1 + y2) / 2
    curve = _el("path", d=f"M{x1:.1f},{y1:.1f} C{x1:.1f},{mid:.1f} {x2:.1f},{mid:.1f} {x2:.1f},{y2:.1f}",
                fill="none", stroke=c, stroke_width=2, marker_end=f"url(#arrow-{kind})")
    # An entity hop is named next to its arrowhead (edges from one anchor fan out there, so names do
    # not overlap); an episode hop is not: its start time is the date under the event it reaches.
    label = _el("text", escaped(name), x=f"{x2:.1f}", y=f"{y2 - 12:.1f}", font_size=11, text_anchor="middle", fill=c,
                stroke="#fff", stroke_width=3, paint_order="stroke") if kind == "entity" and name else ""
    what = f"{kind} {name}" if name else kind
    return _el("g", _el("title", escaped(f"{what} edge, score {e.score:.3f}")) + curve + label)


def _node(ex: Explanation, n: ShownNode, pos, bottom: float, link: bool) -> str:
    x, y = pos[n.node.id]
    ring = ({"stroke": "#1d2330", "stroke_width": 2} if n.in_context
            else {"stroke": "#9aa1b0", "stroke_dasharray": "3 2"})
    who = f"{n.node.speaker}: " if n.node.speaker else ""
    tip = f"#{n.rank} {event_ref(n.node)} — {describe_reason(ex, n)}\n{who}{n.node.text}"
    label = f"{event_ref(n.node)} · {n.node.timestamp:%Y-%m-%d}"
    inner = _el("g", _el("title", html.escape(printable(tip, keep_newlines=True)))
                + _el("line", x1=x, y1=y + RADIUS, x2=x, y2=bottom + 4, stroke="#d5d9e2", stroke_dasharray="2 3")
                + _el("circle", cx=x, cy=y, r=RADIUS, fill=ANCHOR_FILL if n.anchor_rank is not None else EVENT_FILL,
                      **ring)
                + _el("text", str(n.rank), x=x, y=y + 4, font_size=11, font_weight=600, text_anchor="middle")
                + _el("text", escaped(label), x=x, y=bottom + 10, font_size=11, fill="#445",
                      transform=f"rotate(50 {x:.1f} {bottom + 10:.1f})"))
    return _el("a", inner, href=f"#ev-{n.node.id}") if link else inner


def _svg_legend(kinds: list[str], top: float) -> tuple[str, int]:
    """The stand-alone figure's legend: one line of the drawn edge types, one of the node marks."""
    x, items = 10, []
    for k in kinds:
        items.append(_el("line", x1=x, y1=top + 11, x2=x + 22, y2=top + 11, stroke=colour(k), stroke_width=4)
                     + _el("text", f"{k} edge", x=x + 28, y=top + 15, font_size=12, fill="#1d2330"))
        x += 28 + 8 * len(f"{k} edge") + 18
    below = 1 if kinds else 0   # the note's line: under the edge types, if any were drawn
    note = _el("text", RING_NOTE, x=10, y=top + LEGEND_ROW * below + 15, font_size=12, fill="#445")
    return "".join(items) + note, LEGEND_ROW * (below + 1) + 8
