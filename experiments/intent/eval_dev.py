"""Intent routing on the LoCoMo dev split: python experiments/intent/eval_dev.py [--dev PATH] [--weights PATH].

Prints (1) the share of dev questions beginning with "When" / "Why" routed to WHEN / WHY, and (2)
accuracy on experiments/intent/dev_labelled_100.jsonl: 100 other dev questions (fixed seed, see
``other_sample``) labelled by hand with the rule in experiments/intent/make_questions.py's docstring.
Each figure is given for the head alone (embeddings only) and for the shipped path (head + the
lead-word rules, questions passed). Dev questions are evaluation only: nothing here trains.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

DEV = Path("/work/shared/data/locomo/locomo10_dev.json")
LABELLED = Path(__file__).with_name("dev_labelled_100.jsonl")
LEADS = {"when": "WHEN", "why": "WHY"}


def dev_questions(path: Path) -> list[dict]:
    """Every dev question as {sample_id, qa_index, question}, in file order."""
    return [{"sample_id": s["sample_id"], "qa_index": i, "question": qa["question"]}
            for s in json.loads(Path(path).read_text()) for i, qa in enumerate(s["qa"])]


def lead(question: str) -> str:
    return question.strip().split(maxsplit=1)[0].lower() if question.strip() else ""


def other_sample(rows: list[dict], n: int = 100, seed: int = 0) -> list[dict]:
    """A fixed sample of the questions that do not begin with "When" or "Why"."""
    others = [r for r in rows if lead(r["question"]) not in LEADS]
    return random.Random(seed).sample(others, n)


def evaluate(dev: Path = DEV, weights: str | None = None, labelled: Path = LABELLED, encoder=None) -> dict:
    """{"when"|"why"|"other100": {"n", "head", "routed"}} with correct counts per path."""
    from magma_torch.query.intent import IntentClassifier
    from magma_torch.query.train_intent import embed, load_encoder

    rows = dev_questions(dev)
    gold_rows = [json.loads(line) for line in labelled.read_text().splitlines() if line.strip()]
    sample = other_sample(rows)
    if [(r["sample_id"], r["qa_index"]) for r in sample] != [(r["sample_id"], r["qa_index"]) for r in gold_rows]:
        raise ValueError(f"{labelled} does not hold the fixed sample of {dev}")
    sets = {}
    for k, label in LEADS.items():
        qs = [r["question"] for r in rows if lead(r["question"]) == k]
        sets[k] = (qs, [label] * len(qs))
    sets["other100"] = ([r["question"] for r in gold_rows], [r["intent"] for r in gold_rows])

    clf = IntentClassifier.load(weights)
    encoder = encoder or load_encoder()
    out = {}
    for name, (qs, gold) in sets.items():
        x = embed(qs, encoder)
        head = clf.predict_labels(x)
        routed = clf.predict_labels(x, qs)
        out[name] = {"n": len(qs), "head": sum(p == g for p, g in zip(head, gold, strict=True)),
                     "routed": sum(p == g for p, g in zip(routed, gold, strict=True)),
                     "misses": [(q, g, p) for q, g, p in zip(qs, gold, routed, strict=True) if p != g]}
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dev", default=str(DEV))
    p.add_argument("--weights", help="intent head .safetensors (default: the shipped head)")
    p.add_argument("-v", "--verbose", action="store_true", help="list the routed path's misses")
    a = p.parse_args(argv)
    res = evaluate(Path(a.dev), a.weights)
    for name, r in res.items():
        print(f"{name:9s} head alone {r['head']}/{r['n']} = {r['head'] / r['n']:.3f}   "
              f"head + rules {r['routed']}/{r['n']} = {r['routed'] / r['n']:.3f}")
        if a.verbose:
            for q, g, pr in r["misses"]:
                print(f"    gold {g:6s} got {pr:6s} {q}")


if __name__ == "__main__":
    main()
