"""An LLM whose generations are kept in a JSON-lines file: a rerun gets them back without the model.

A slow path that consolidates with a small model on a CPU takes hours per conversation; a run
stopped half-way (Slurm preemption, a session that ends) would otherwise redo every call. With
``consolidation.cache=FILE`` (magma-run) or ``CachedLLM(llm, FILE)`` (Python) each successful
generation is appended to FILE, synced, as soon as its call returns; the same call later is
answered from the file. The file moves with a run folder, so a clone that holds it resumes too.

A line's key is a hash of the backend's name, the prompt, the output schema, the token budget and
the temperature: a changed prompt misses and is generated. Each line also names the model that wrote
it (the backend's ``identity``: its model, server and decoding settings), and a file that another
model wrote is refused when opened: the key holds only the backend's name, so before, a file written
with one model answered the same prompts for any other one behind that backend. Lines from before
that (they name no model) are taken as the file's model's. Failed generations are not kept, so a
rerun tries them again. Each line also keeps what the call cost (tokens and seconds, a batch's
seconds shared evenly among its prompts), so the cost of a consolidation can be read from its file
after any number of resumed attempts.

An LLM consolidator's prompt shows the graph that earlier batches built, so a rerun replays a
consolidation exactly only when its batches form the same way: a foreground slow path
(``memory.slow_path.background=false``), which takes full batches in order.
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from magma_torch.errors import MagmaError
from magma_torch.files import append_synced, read_complete_lines

from .base import LLM, Generation, Prompt, checked_generate
from .schema import to_json_schema


# what each line keeps: a line without one of them is damaged (a hand edit, another tool's file)
FIELDS = ("key", "text", "parsed", "prompt_tokens", "completion_tokens", "seconds")
# the fields of a line that must hold a number (cost sums them): another type is damage too
NUMBERS = ("prompt_tokens", "completion_tokens", "seconds")
# and those that must hold a string: the key lines are looked up by, the text a Generation hands on
STRINGS = ("key", "text")


class CacheModelError(MagmaError, ValueError):
    """A generation file that another model wrote (its lines name another ``identity``)."""


class CachedLLM:
    """``llm`` behind the generation file ``path`` (created on first use). ``usage`` counts only
    the calls that reached the model; ``hits`` counts those the file answered."""

    def __init__(self, llm: LLM, path: str | Path):
        self.llm, self.path = llm, Path(path)
        self.name = llm.name
        self.identity = getattr(llm, "identity", None)   # None: a model that does not say (a replayer, a test's)
        self.hits = 0
        self._lock = threading.Lock()
        # a line that is not a JSON object with every field of a kept generation, its cost in numbers and its
        # key and text strings, is refused (DamagedFileError), naming the file, line and field, before any is reused
        lines = read_complete_lines(self.path, key=FIELDS, numbers=NUMBERS, strings=STRINGS)
        if self.identity is not None:
            other = next((line["model"] for line in lines if line.get("model", self.identity) != self.identity), None)
            if other is not None:
                raise CacheModelError(f"{self.path}: its generations are another model's ({_shown(other)}), not "
                                      f"this llm's ({_shown(self.identity)}): give consolidation.cache another file")
        self._lines: dict[str, dict] = {line["key"]: line for line in lines}

    @property
    def usage(self):
        return self.llm.usage

    def __len__(self) -> int:
        return len(self._lines)

    def key(self, prompt: Prompt, schema: dict | type | None, max_tokens: int, temperature: float) -> str:
        spec = {"model": self.name, "prompt": prompt, "schema": None if schema is None else to_json_schema(schema),
                "max_tokens": int(max_tokens), "temperature": float(temperature)}
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()

    def generate(self, prompts: Sequence[Prompt], schema: dict | type | None = None, max_tokens: int = 256,
                 temperature: float = 0.0) -> list[Generation]:
        keys = [self.key(p, schema, max_tokens, temperature) for p in prompts]
        with self._lock:
            missing = [i for i, k in enumerate(keys) if k not in self._lines]
        if missing:
            t0 = time.perf_counter()
            gens = checked_generate(self.llm, [prompts[i] for i in missing], schema=schema, max_tokens=max_tokens,
                                    temperature=temperature)
            seconds = (time.perf_counter() - t0) / len(missing)
            new = [{"key": keys[i], "text": g.text, "parsed": _plain(g.parsed), "prompt_tokens": g.prompt_tokens,
                    "completion_tokens": g.completion_tokens, "seconds": seconds,
                    **({} if self.identity is None else {"model": self.identity})}
                   for i, g in zip(missing, gens, strict=True) if g.error is None]
            fresh = dict(zip(missing, gens, strict=True))
            with self._lock:
                if new:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    with self.path.open("a", encoding="utf-8") as f:
                        append_synced(f, new)
                    self._lines.update((line["key"], line) for line in new)
        else:
            fresh = {}
        with self._lock:
            self.hits += len(prompts) - len(fresh)
            return [fresh[i] if i in fresh else _generation(self._lines[k], schema) for i, k in enumerate(keys)]

    def close(self) -> None:
        self.llm.close()


def _shown(identity) -> str:
    return json.dumps(identity, sort_keys=True)


def _plain(parsed):
    """``parsed`` as JSON: a pydantic model's fields, else the decoded JSON as it is."""
    return parsed.model_dump(mode="json") if hasattr(parsed, "model_dump") else parsed


def _generation(line: dict, schema: dict | type | None) -> Generation:
    parsed = line["parsed"]
    if parsed is not None and isinstance(schema, type):
        parsed = schema.model_validate(parsed)   # a pydantic schema's model again, as the backend gave it
    return Generation(line["text"], parsed, line["prompt_tokens"], line["completion_tokens"])


def cost(path: str | Path) -> dict:
    """What the generations kept in ``path`` cost: their count, tokens and seconds, in all and per generation."""
    # damage: DamagedFileError
    lines = read_complete_lines(Path(path), cut=False, key=FIELDS, numbers=NUMBERS, strings=STRINGS)
    n = len(lines)
    total = {k: sum(line[k] for line in lines) for k in NUMBERS}
    return {"generations": n, **total, "per_generation": {k: v / n if n else 0.0 for k, v in total.items()}}
