"""Knowledge-update questions: does the context put the fact that holds now ahead of the one it
replaced? For LongMemEval-schema files whose questions have two evidence turns, an earlier
fact and its later update (``tests/data/longmemeval_knowledge_updates.json``).

Per question, one memory is built from the haystack (heuristic consolidation by default) and
the question retrieved at its ``question_date``; evidence is read only to score:

- ``later_first``: both fact turns are in the context and the later one is shown first;
- ``recall_all@<B>tok``: both fact turns are in the context of B tokens (``eval.metrics``);
- ``linked``: the memory holds a ``supersedes`` edge from the later fact to the earlier one.

    python -m magma_torch.eval.knowledge_updates tests/data/longmemeval_knowledge_updates.json [--off]

``--off`` measures the same memories without supersession (no links, salience order).
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Mapping

from magma_torch.config import load_group
from magma_torch.eval.datasets.longmemeval import load_longmemeval
from magma_torch.eval.metrics import recall_all_at_tokens
from magma_torch.eval.runner import records
from magma_torch.memory import MagmaMemory
from magma_torch.text.embedder import Embedder

BUDGETS = (1000, 2000)


def configs(supersession: bool) -> tuple:
    """(memory, consolidation) configs: magma + heuristic, with or without supersession."""
    memory, consolidation = load_group("memory", "magma"), load_group("consolidation", "heuristic")
    memory.slow_path.background = False
    if not supersession:
        memory.retrieval.supersession.current_first = False
        memory.retrieval.supersession.pull_current = False
        consolidation.supersession = None
    return memory, consolidation


def measure(path: str, supersession: bool = True, embedder: Embedder | None = None) -> list[dict]:
    """One row per question with evidence: its id, the scores above and its intent."""
    memory, consolidation = configs(supersession)
    embedder = embedder or Embedder(device="cpu")
    rows = []
    for sample in load_longmemeval(path):
        q = sample.questions[0]
        if len(q.evidence) != 2:
            continue
        with MagmaMemory(memory, consolidation, device="cpu", embedder=embedder) as mem:
            ids = mem.add_many(records(sample))
            mem.consolidate()
            r = mem.retrieve(q.question, q.query_time)
            by_source = {t.source_id: i for t, i in zip(sample.turns, ids, strict=True)}
            later_src, earlier_src = sorted(q.evidence, key=by_source.__getitem__, reverse=True)
            later, earlier = by_source[later_src], by_source[earlier_src]
            linked = later in _superseders(mem, earlier)
        at = {s: r.context.find(f"({s})") for s in (later_src, earlier_src)}
        row = {"question_id": q.question_id, "intent": r.intent, "linked": linked,
               "later_first": min(at.values()) >= 0 and at[later_src] < at[earlier_src]}
        srcs, toks = [n.source_ids for n in r.nodes], [n.tokens for n in r.nodes]
        row.update({f"recall_all@{b}tok": recall_all_at_tokens(srcs, toks, q.evidence, b) for b in BUDGETS})
        rows.append(row)
    return rows


def _superseders(mem: MagmaMemory, event: int) -> set[int]:
    later, earlier, _ = mem.store.graph.edges("supersedes")
    return {s for s, d in zip(later.tolist(), earlier.tolist(), strict=True) if d == event}


def summary(rows: list[dict]) -> Mapping:
    n = len(rows)
    keys = ["later_first", "linked"] + [f"recall_all@{b}tok" for b in BUDGETS]
    return {"n": n, **{k: sum(float(r[k]) for r in rows) / n if n else None for k in keys}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path")
    ap.add_argument("--off", action="store_true", help="without supersession (no links, salience order)")
    ap.add_argument("--rows", action="store_true", help="print every question's row too")
    args = ap.parse_args(argv)
    rows = measure(args.path, supersession=not args.off)
    if args.rows:
        for r in rows:
            print(json.dumps(r))
    print(json.dumps(summary(rows)))


if __name__ == "__main__":
    main()
