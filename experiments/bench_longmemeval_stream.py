"""Streaming benchmark of the LongMemEval loader: memory stays flat however large the file.

Writes a synthetic file in the exact LongMemEval schema (original filler text, ``--records``
questions of ``--sessions`` sessions x ``--turns`` turns), then loads it with
``load_longmemeval`` sample by sample and reports file size, records/s, MB/s and how much the
process's peak RSS grew while loading. The file is deleted afterwards unless ``--keep``.

    python experiments/bench_longmemeval_stream.py --records 400 --json out.json
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

from machine import machine  # experiments/machine.py

from magma_torch.eval.datasets import load_longmemeval


def record(i: int, sessions: int, turns: int) -> dict:
    sids = [f"answer_{i}_{k}" if k % 10 == 0 else f"sharegpt_{i}_{k}" for k in range(sessions)]
    return {"question_id": f"q{i}", "question_type": "multi-session", "question": "How many times did I go hiking?",
            "answer": "3", "question_date": "2023/12/18 (Mon) 04:17", "haystack_session_ids": sids,
            "haystack_dates": [f"2023/{1 + k % 12:02d}/{1 + k % 28:02d} (Mon) 10:{k % 60:02d}" for k in range(sessions)],
            "haystack_sessions": [[{"role": "user" if t % 2 == 0 else "assistant",
                                    "content": f"Turn {t} of session {k}: some filler about cooking, running and "
                                               "gardening that makes the haystack long. " * 4,
                                    **({"has_answer": True} if k % 10 == 0 and t == 0 else {})}
                                   for t in range(turns)] for k in range(sessions)],
            "answer_session_ids": [s for s in sids if s.startswith("answer_")]}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=400)
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    fd, name = tempfile.mkstemp(suffix=".json")
    path = Path(name)
    with os.fdopen(fd, "w") as f:  # written record by record, so writing does not raise the peak either
        f.write("[")
        for i in range(args.records):
            f.write(("," if i else "") + json.dumps(record(i, args.sessions, args.turns)))
        f.write("]")
    size_mb = path.stat().st_size / 2**20
    before = peak_rss_mb()
    t0 = time.perf_counter()
    n = turns = 0
    for s in load_longmemeval(path):
        n += 1
        turns += len(s.turns)
    elapsed = time.perf_counter() - t0
    out = {"file_mb": round(size_mb, 1), "records": n, "turns": turns, "load_s": round(elapsed, 2),
           "records_per_s": round(n / elapsed, 1), "mb_per_s": round(size_mb / elapsed, 1),
           "peak_rss_before_mb": round(before, 1), "peak_rss_growth_mb": round(peak_rss_mb() - before, 1), **machine()}
    if not args.keep:
        path.unlink()
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
