"""Print the supersession links the heuristic rules make on a LoCoMo file, for an audit:
the same tracker, speakers, streams and turn order as a magma-run build (the links do not
depend on spaCy or embeddings).

    python experiments/supersession/locomo_links.py ../shared/data/locomo/locomo10_dev.json
"""
from __future__ import annotations

import sys

from magma_torch.eval.datasets.locomo import load_locomo
from magma_torch.eval.runner import records
from magma_torch.ingest.supersession import UpdateTracker


def main(path: str) -> None:
    tracker, n = UpdateTracker("default"), 0
    for sample in load_locomo(path):
        recs = records(sample)
        for i, r in enumerate(recs):
            for link in tracker.observe(n + i, r["stream"], r["speaker"], r["text"]):
                old = recs[link.earlier - n]
                print(f"{sample.sample_id} {old['source_id']} -> {r['source_id']} ({link.cue}, {link.confidence})\n"
                      f"  earlier [{old['speaker']}]: {old['text']}\n  later   [{r['speaker']}]: {r['text']}")
        n += len(recs)


if __name__ == "__main__":
    main(sys.argv[1])
