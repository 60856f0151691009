"""An explanation as plain terminal text; every event text is shown as data (``printable``)."""
from __future__ import annotations

from datetime import datetime

from magma_torch.explain.printable import printable
from magma_torch.explain.subgraph import (ANCHOR_ORDER, Explanation, ShownNode, event_ref, listing_order,
                                         why_no_anchors)

TEXT_WIDTH = 90   # characters of event text per list line; the context below is shown whole


def format_text(ex: Explanation) -> str:
    r = ex.retrieval
    lines = [f"question: {printable(r.question)}",
             f"asked at: {_when(ex.query_time) if ex.query_time else 'not given'}",
             f"time window: {_window(r.time_window)}",
             f"intent: {r.intent}" + (f"  ({_probs(r.intent_probs)})" if r.intent_probs else ""), ""]
    lines += _anchor_lines(ex) + [""] + _node_lines(ex) + [""] + _path_lines(ex) + [""]
    lines += [f"context ({r.context_tokens} tokens):", printable(r.context, keep_newlines=True)]
    return "\n".join(lines)


def describe_reason(ex: Explanation, n: ShownNode) -> str:
    """Why an event was retrieved, in one phrase."""
    if n.anchor_rank is not None:
        return f"anchor #{n.anchor_rank}"
    if n.reached_by is None:
        if not ex.retrieval.anchors:
            return "listed without ranking (full-context memory)"
        updated = ex.updated(n.node.id)
        if updated is not None:
            older, between = updated
            via = f" via {', '.join(map(ex.ref, between))}" if between else ""
            return f"the update of {event_ref(older)}{via} (supersession)"
        if ex.retrieval.time_window is not None:   # its path ran through an event the time filter left out
            return "expanded from an event outside the question's time window (time filter)"
        # no time filter: only supersession adds an event the beam did not reach (its chain is not known here)
        return "the current version of a superseded event (supersession)"
    e = n.reached_by
    kind, name = ex.hop(e.relation)
    src = next(m.node for m in ex.nodes if m.node.id == e.src)   # shown: paths are kept whole
    via = f" via {kind} {name}" if name else ""
    return f"{kind} edge{via} from {event_ref(src)}"


def _anchor_lines(ex: Explanation) -> list[str]:
    r = ex.retrieval
    if not r.anchors:
        return [f"anchors: none ({why_no_anchors(r)})"]
    head = (f"anchors: reciprocal-rank fusion of {', '.join(ex.signals)}, {ANCHOR_ORDER}; rank in each ranking, "
            "'-' = not ranked")
    rows = [["#", "event", "fused"] + list(ex.signals) + ["text"]]
    by_id = {n.id: n for n in r.nodes}
    for i, a in enumerate(ex.anchors, 1):
        rows.append([str(i), event_ref(by_id[a.id]), f"{a.rrf:.4f}"]
                    + [str(a.ranks[s]) if s in a.ranks else "-" for s in ex.signals] + [_short(by_id[a.id].text)])
    more = len(r.anchors) - len(ex.anchors)
    return [head] + _table(rows) + ([f"  … {more} more anchors"] if more > 0 else [])


def _node_lines(ex: Explanation) -> list[str]:
    rows = [["rank", "event", "time", "valid until", "score", "ctx", "retrieved as", "text"]]
    for n in ex.nodes:
        rows.append([str(n.rank), event_ref(n.node), _when(n.node.timestamp), valid_until(ex, n.node),
                     f"{n.node.score:.3f}", "yes" if n.in_context else "no", describe_reason(ex, n),
                     _short(f"{n.node.speaker}: {n.node.text}" if n.node.speaker else n.node.text)])
    more = f"; {ex.hidden_nodes} more not shown" if ex.hidden_nodes else ""
    return [f"retrieved events, {listing_order(ex.retrieval)} (ctx: in the context{more})"] + _table(rows)


def _path_lines(ex: Explanation) -> list[str]:
    if not ex.retrieval.paths:
        return ["paths: none (the beam search added no event to the anchors)"]
    if not ex.edges:
        return [f"paths: {len(ex.retrieval.paths)}, none to the shown events (raise --expansions to see them)"]
    ref = {n.node.id: event_ref(n.node) for n in ex.nodes}
    out = ["paths: beam-search edges to the shown events (score of the reached event)"]
    for e in ex.edges:
        kind, name = ex.hop(e.relation)
        label = f"{kind} [{printable(name)}]" if name else kind
        out.append(f"  {printable(ref[e.src])} --{label}--> {printable(ref[e.dst])}   {e.score:.3f}")
    return out


def _table(rows: list[list[str]]) -> list[str]:
    rows = [[printable(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1] for row in rows]


def _short(text: str) -> str:
    text = printable(text)
    return text if len(text) <= TEXT_WIDTH else text[: TEXT_WIDTH - 1] + "…"


def _when(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M")


def valid_until(ex: Explanation, node) -> str:
    """"now" for a fact that still holds, else when and by which event it was superseded, named as the
    context names it."""
    return "now" if node.valid_to is None else f"{_when(node.valid_to)} ({ex.ref(node.superseded_by)})"


def _window(w) -> str:
    return "none in the question" if w is None else f"{_when(w[0])} to {_when(w[1])}"


def _probs(p: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in sorted(p.items(), key=lambda kv: -kv[1]))
