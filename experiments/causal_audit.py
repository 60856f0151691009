"""Causal links and entities of the heuristic consolidator on LoCoMo, without building a memory.

    python experiments/causal_audit.py /work/shared/data/locomo/locomo10_dev.json --sample 30 --seed 0

Feeds every conversation's turns to `HeuristicConsolidator` the way the slow-path worker
does (batches of 64, each turn with the up-to-6 preceding turns of its conversation),
prints the counts (turns, causal links, links per 1,000 turns, entity nodes and
event-entity edges summed over one memory per conversation, as `magma-run` builds them,
mean/max entity degree, links per cue) and a seeded random sample of kept links as
Markdown, cause and effect text side by side, for a person to judge.
"""
from __future__ import annotations

import argparse
import collections
import random

from magma_torch.eval.datasets.locomo import load_locomo
from magma_torch.ingest.consolidator import EventView
from magma_torch.ingest.heuristic import HeuristicConsolidator


def run(path: str, batch: int = 64, window: int = 6):
    hc = HeuristicConsolidator(window=window)
    views, turns = [], []
    for sample in load_locomo(path):
        for t in sample.turns:
            views.append(EventView(len(views), t.text, t.speaker, sample.sample_id, t.timestamp))
            turns.append((sample.sample_id, t))
    props = []
    for b in range(0, len(views), batch):
        chunk = views[b:b + batch]
        ctx = {v.id: [u for u in views[max(0, v.id - window):v.id] if u.stream == v.stream] for v in chunk}
        props += hc.propose(chunk, ctx)
    # One memory per conversation (as magma-run builds them): an entity node is (conversation, name).
    mentions = [(p.event_id, m.name) for p in props for m in p.entities] + [(e, m.name) for e, m in hc.backfill()]
    mentions = [(e, (views[e].stream, name)) for e, name in mentions]
    links = [link for p in props for link in p.causal]
    return turns, set(mentions), links


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path")
    ap.add_argument("--sample", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    turns, mentions, links = run(args.path)
    degree = collections.Counter(name for _, name in mentions)
    n = len(turns)
    print(f"turns {n}, causal links {len(links)} ({1000 * len(links) / n:.1f} per 1,000 turns), "
          f"entity nodes {len(degree)}, event-entity edges {len(mentions)}, "
          f"entity degree mean {len(mentions) / max(1, len(degree)):.2f} max {max(degree.values(), default=0)}")
    cues = collections.Counter(link.cue.split(":")[0] for link in links)
    print("links per cue: " + ", ".join(f"{c} {k}" for c, k in cues.most_common()))
    print()
    picked = sorted(random.Random(args.seed).sample(range(len(links)), min(args.sample, len(links))))
    for k, i in enumerate(picked, 1):
        link = links[i]
        (conv, cause), (_, effect) = turns[link.cause], turns[link.effect]
        print(f"{k}. `{conv}` {cause.source_id} -> {effect.source_id}, cue `{link.cue}`, confidence {link.confidence}")
        print(f"   - cause: {cause.speaker}: {cause.text}")
        print(f"   - effect: {effect.speaker}: {effect.text}")
        print("   - verdict: ")


if __name__ == "__main__":
    main()
