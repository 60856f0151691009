"""Two QA run folders over the same questions: the paired bootstrap interval of a score
difference (experiments/qa_table.py). Reads finished folders only and never writes them."""
from __future__ import annotations

from pathlib import Path

from magma_torch.errors import MagmaError
from magma_torch.eval.qa_metrics import paired_bootstrap
from magma_torch.eval.run_folder import counted
from magma_torch.files import read_complete_lines, read_json_object

# left out as in metrics.json's `overall`: their F1 is LoCoMo's abstention rule, reported apart
EXCLUDED = {"adversarial"}


class CompareError(MagmaError, ValueError):
    """Run folders that cannot be compared; the message names the folder."""


def read_scores(folder: Path) -> dict[str, dict]:
    """The question rows of a finished run (one with metrics.json) as its scores.jsonl keeps them
    (the committed, text-free copy of predictions.jsonl), by question id: those metrics.json counts."""
    folder = Path(folder)
    if not (folder / "metrics.json").is_file():
        raise CompareError(f"{folder}: no metrics.json (not a finished run)")
    path = folder / "scores.jsonl"
    if not path.is_file():
        raise CompareError(f"{folder}: no scores.jsonl; rerun its magma-run command (same out_dir), which "
                           "writes it from predictions.jsonl")
    # a damaged line (not a JSON object, no question_id) is a DamagedFileError naming the file and line, a
    # damaged metrics.json one naming the file
    rows = read_complete_lines(path, cut=False, key="question_id")
    return {r["question_id"]: r for r in counted(read_json_object(folder / "metrics.json"), rows)}


def paired_difference(folder_a: Path, folder_b: Path, key: str = "f1", resamples: int = 10_000,
                      seed: int = 0) -> dict:
    """``key`` of run a minus run b over their non-adversarial questions, with its 95 % paired
    bootstrap interval. Both runs must hold the same questions."""
    a, b = read_scores(folder_a), read_scores(folder_b)
    if a.keys() != b.keys():
        raise CompareError(f"{folder_a} and {folder_b} hold different questions ({len(a.keys() ^ b.keys())} "
                           "in only one): compare runs over the same questions")
    ids = sorted(q for q, r in a.items() if r["category"] not in EXCLUDED and r.get(key) is not None
                 and b[q].get(key) is not None)
    if not ids:
        raise CompareError(f"{folder_a}: no question with a {key} score in both runs")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        # zero resamples ended in numpy's IndexError on an empty array
        raise CompareError(f"resamples must be a whole number >= 1, got {resamples!r}")
    diff, low, high = paired_bootstrap([a[q][key] for q in ids], [b[q][key] for q in ids], resamples, seed)
    return {"key": key, "n": len(ids), "difference": diff, "low": low, "high": high, "resamples": resamples,
            "seed": seed}
