"""The graph an LLM consolidation built, replayed from a run folder's consolidation cache.

    python experiments/llm_graph_audit.py experiments/results/qa_small/magma_llm_graph --sample 20 --seed 0 \
        --rejected 20 --against experiments/results/qa_small/magma

Rebuilds every memory of the folder's run (its config.yaml: dataset, memory, consolidation) with
the generations kept in ``consolidation.cache`` alone, so it needs no model and no GPU; a prompt
the file lacks (a run still consolidating) fails its event, and the figures count only the
events whose generation the file held. Prints Markdown: per memory, the causal links, entity
mentions and knowledge updates the model proposed and those kept; the rejection reasons,
counted; what the kept generations cost (tokens and seconds per event, as they were made); and
a seeded sample of kept causal links, cause and effect side by side, for a person to judge;
with ``--rejected N``, also a seeded sample of the causal links the model proposed and validation
dropped, with their quoted words and the reason, to judge what the rules throw away.
``--against FOLDER`` puts the counts of another run's graph of the same conversations beside them
(one that needs no model, such as the heuristic graph of experiments/results/qa_small/magma).
"""
from __future__ import annotations

import argparse
import collections
import random
import re
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from magma_torch import MagmaMemory
from magma_torch.eval.datasets import load_dataset, select_samples
from magma_torch.eval.runner import records
from magma_torch.ingest.llm_consolidator import LLMConsolidator, shown_events, shown_text
from magma_torch.llm.base import Generation, Usage
from magma_torch.llm.cache import CachedLLM, cost
from magma_torch.text.embedder import Embedder

NOT_KEPT = "not in the consolidation cache"
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"|<words not in the event>")   # the last: what a note withholds
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_REJECTED_LINK = re.compile(r"rejected causal link '(n\d+)'->'(n\d+)': (.*)")


class ReplayOnly:
    """A model that has nothing to say: every prompt the cache lacks fails with NOT_KEPT."""

    def __init__(self, name: str):
        self.name, self.usage = name, Usage()

    def generate(self, prompts, schema=None, max_tokens=256, temperature=0.0):
        return [Generation("", error=NOT_KEPT) for _ in prompts]

    def close(self) -> None:
        pass


class Recorder:
    """Passes generations through and keeps the parsed ones, for the proposed counts, with the events
    each prompt showed (ref -> speaker, text), keyed by n0's text as shown."""

    def __init__(self, llm):
        self.llm, self.name, self.parsed, self.shown = llm, llm.name, [], {}

    @property
    def usage(self):
        return self.llm.usage

    def generate(self, prompts, **kw):
        gens = self.llm.generate(prompts, **kw)
        for prompt, g in zip(prompts, gens, strict=True):
            if g.error is None and isinstance(g.parsed, dict):
                refs = shown_events(prompt)
                self.parsed.append(g.parsed)
                self.shown[refs["n0"][1]] = (refs, g.parsed)
        return gens

    def close(self) -> None:
        pass


def reason_class(note: str) -> str:
    """A rejection note without its particulars: 'rejected entity 'x': a speaker' -> 'entity: a speaker'."""
    what = note.removeprefix("rejected ").split(" ", 1)[0].rstrip(":")
    why = note.split(": ", 1)[1] if ": " in note else note
    return f"{what}: {_NUMBER.sub('N', _QUOTED.sub('X', why))}"


@dataclass
class Graph:
    """What one memory's consolidation left: its causal links, mentions, entities and updates."""

    causal: list[tuple[int, int, float]]
    mentions: int
    entities: int
    updates: int
    status: list[tuple[str, str]]
    texts: dict[int, tuple[str, str]]


def built_graph(memory_cfg, consolidation, sample, embedder: Embedder, llm=None) -> Graph:
    with MagmaMemory(memory_cfg, consolidation, namespace=sample.sample_id, embedder=embedder, llm=llm) as mem:
        ids = mem.add_many(records(sample))
        mem.consolidate()
        rows = mem.store.events.rows
        return Graph(causal=list(zip(*(t.tolist() for t in mem.store.graph.edges("causal")), strict=True)),
                     mentions=mem.store.graph.num_edges("entity"), entities=len(mem.store.entities),
                     updates=mem.store.graph.num_edges("supersedes"), status=mem.worker.statuses(ids),
                     texts={i: (rows[i].speaker, rows[i].text) for i in range(len(rows))})


def rejected_links(g: Graph, rec: Recorder, max_chars: int) -> list[tuple[int, tuple, tuple, str, str]]:
    """The causal links the model proposed and validation dropped: (event, cause, effect, words,
    reason), cause and effect as (speaker, text) the way the event's prompt showed them."""
    out = []
    for event, (kind, notes) in enumerate(g.status):
        seen = rec.shown.get(shown_text(g.texts[event][1], max_chars))
        if kind != "consolidated" or seen is None:
            continue
        refs, parsed = seen
        words = {(str(i.get("cause")), str(i.get("effect"))): i.get("words")
                 for i in parsed.get("causal") or [] if isinstance(i, dict)}
        for note in notes.split("; "):
            if m := _REJECTED_LINK.fullmatch(note):
                c, e, why = m.groups()
                out.append((event, refs.get(c, ("?", "?")), refs.get(e, ("?", "?")), words.get((c, e)), why))
    return out


def _per_thousand(links: int, turns: int) -> str:
    return f"{links} ({1000 * links / max(turns, 1):.1f} per 1,000 turns)"


def _run_config(folder: Path, data: str | None):
    cfg = OmegaConf.load(folder / "config.yaml")
    cfg.out_dir = str(folder)
    if data:
        cfg.dataset.path = data
    return cfg


def audit(folder: Path, sample: int, seed: int, data: str | None, against: Path | None = None,
          rejected: int = 0) -> str:
    cfg = _run_config(folder, data)
    cache = Path(cfg.consolidation.cache)
    d = cfg.dataset
    samples = select_samples(load_dataset(d.name, d.get("path")), d.get("limit"), d.get("sample_ids"), d.get("shard"))
    consolidation = OmegaConf.to_container(cfg.consolidation, resolve=True)
    consolidation["cache"] = None            # the Recorder holds the cache, so it sees each generation
    other = _run_config(against, data) if against else None
    other_kind = other.consolidation._target_.rsplit(".", 1)[-1] if other else None
    if other_kind == LLMConsolidator.__name__:
        raise SystemExit(f"--against {against}: its graph needs a model ({other_kind}); name a folder whose graph "
                         "needs none")
    embedder = Embedder(**OmegaConf.to_container(cfg.memory.embedder, resolve=True))
    out = [f"# The LLM-built graph of `{folder}`", ""]
    c = cost(cache)
    out.append(f"Consolidation cache `{cache.name}`: {c['generations']} generations, "
               f"{c['per_generation']['prompt_tokens']:.0f} prompt + {c['per_generation']['completion_tokens']:.1f} "
               f"completion tokens and {c['per_generation']['seconds']:.1f} s per generation as made "
               f"({c['seconds'] / 3600:.2f} h in all).")
    links, dropped = [], []
    for s in samples:
        rec = Recorder(CachedLLM(ReplayOnly(cfg.llm.name), cache))
        g = built_graph(cfg.memory, consolidation, s, embedder, llm=rec)
        replayed = [st for st in g.status if st[1] != f"llm generation failed: {NOT_KEPT}"]
        failed = collections.Counter(st[1] for st in replayed if st[0] == "failed")
        reasons = collections.Counter(reason_class(note) for kind, notes in replayed if kind == "consolidated"
                                      for note in notes.split("; ") if note)
        proposed = {k: sum(len(p.get(k) or []) for p in rec.parsed) for k in ("causal", "entities", "supersedes")}
        n = len(replayed)
        rows = [("causal links", proposed["causal"], _per_thousand(len(g.causal), n)),
                ("event–entity edges", f"{proposed['entities']} mentions", g.mentions),
                ("entity nodes", "", g.entities),
                ("knowledge updates", proposed["supersedes"], g.updates)]
        head, rule = "| | proposed | kept |", "| --- | --- | --- |"
        if other is not None:
            # the other folder's graph over the same turns (all of them, while this one may be cut short)
            h = built_graph(other.memory, OmegaConf.to_container(other.consolidation, resolve=True), s, embedder)
            theirs = [_per_thousand(len(h.causal), len(h.status)), h.mentions, h.entities, h.updates]
            rows = [(*r, t) for r, t in zip(rows, theirs, strict=True)]
            head, rule = head + f" `{against.name}` ({other_kind}) |", rule + " --- |"
        out += ["", f"## `{s.sample_id}`: {n} of {len(g.status)} events replayed from the cache", "", head, rule,
                *("| " + " | ".join(map(str, r)) + " |" for r in rows), "",
                f"Events failed: {sum(failed.values())}" + "".join(f"; {k} ({v})" for k, v in failed.most_common()),
                "", "| rejection reason | count |", "| --- | --- |",
                *(f"| {r} | {k} |" for r, k in reasons.most_common())]
        links += [(s.sample_id, cause, effect, conf, g.texts) for cause, effect, conf in g.causal]
        dropped += [(s.sample_id, *r) for r in rejected_links(g, rec, consolidation["max_chars_per_event"])]
    picked = sorted(random.Random(seed).sample(range(len(links)), min(sample, len(links))))
    out += ["", f"## {len(picked)} kept causal links (seed {seed}), for a person to judge", ""]
    for k, i in enumerate(picked, 1):
        sid, cause, effect, conf, texts = links[i]
        out += [f"{k}. `{sid}` event {cause} -> {effect}, confidence {conf:.2f}",
                f"   - cause: {texts[cause][0]}: {texts[cause][1]}",
                f"   - effect: {texts[effect][0]}: {texts[effect][1]}",
                "   - verdict: "]
    if rejected:
        picked = sorted(random.Random(seed).sample(range(len(dropped)), min(rejected, len(dropped))))
        out += ["", f"## {len(picked)} of {len(dropped)} rejected causal proposals (seed {seed}), for a person "
                "to judge what validation drops", ""]
        for k, i in enumerate(picked, 1):
            sid, event, cause, effect, words, why = dropped[i]
            out += [f"{k}. `{sid}` event {event}: {why}",
                    f"   - cause: {cause[0]}: {cause[1]}", f"   - effect: {effect[0]}: {effect[1]}",
                    f"   - words: {words!r}", "   - verdict: "]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="a magma-run folder of a consolidation=llm run with consolidation.cache")
    ap.add_argument("--sample", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default=None, help="the dataset file, where it is not at the config's dataset.path")
    ap.add_argument("--against", type=Path, default=None,
                    help="a run folder of the same conversations whose graph needs no model (e.g. the heuristic "
                         "graph of experiments/results/qa_small/magma): its link counts go beside these")
    ap.add_argument("--rejected", type=int, default=0,
                    help="also sample this many causal links the model proposed and validation dropped")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    text = audit(args.folder, args.sample, args.seed, args.data, args.against, args.rejected)
    if args.out:
        args.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
