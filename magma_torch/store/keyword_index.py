"""BM25 keyword search over events with bm25s.

Tokenisation (stemming, stopwords) happens once per event when it is added; the BM25
matrix is rebuilt from the cached tokens only when a search finds new events, because
bm25s builds its sparse index in one pass rather than by appending.
"""
from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import bm25s


class KeywordIndex:
    def __init__(self, k1: float = 1.5, b: float = 0.75, stopwords: str = "english"):
        self.k1, self.b, self.stopwords = k1, b, stopwords
        self._docs: list[list[str]] = []
        self._bm25: bm25s.BM25 | None = None
        self._indexed = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._docs)

    @functools.cached_property
    def _stemmer(self):
        import Stemmer  # lazy, like bm25s: a store of pre-embedded events never tokenises

        return Stemmer.Stemmer("english")

    def tokenize(self, texts: list[str]) -> list[list[str]]:
        import bm25s

        return bm25s.tokenize(texts, stopwords=self.stopwords, stemmer=self._stemmer,
                              return_ids=False, show_progress=False)

    def add(self, tokens: list[list[str]]) -> None:
        self._docs.extend(tokens)

    def extend_doc(self, doc_id: int, tokens: list[str]) -> None:
        """Append terms to a stored document (an episode that grew); the next search re-indexes."""
        with self._lock:
            self._docs[doc_id] = self._docs[doc_id] + list(tokens)
            self._indexed = -1

    def tokens(self, doc_id: int) -> list[str]:
        return self._docs[doc_id]

    def _current(self, n: int) -> bm25s.BM25 | None:
        with self._lock:
            if self._indexed != n:
                import bm25s

                bm25 = bm25s.BM25(k1=self.k1, b=self.b)
                # bm25s rejects empty documents; a placeholder token keeps doc ids aligned.
                bm25.index([d if d else ["\x00"] for d in self._docs[:n]], show_progress=False)
                self._bm25, self._indexed = bm25, n
            return self._bm25

    def scores(self, queries: list[str], upto: int | None = None) -> np.ndarray:
        """BM25 score of every document id < upto for each query: [len(queries), upto]."""
        n = len(self._docs) if upto is None else min(upto, len(self._docs))
        out = np.zeros((len(queries), n), dtype=np.float32)
        if n == 0:
            return out
        bm25 = self._current(n)
        for qi, q_tokens in enumerate(self.tokenize(queries)):
            known = [t for t in q_tokens if t in bm25.vocab_dict]
            if known:
                out[qi] = bm25.get_scores(known)
        return out

    @staticmethod
    def top_k(scores: np.ndarray, k: int) -> np.ndarray:
        """Ids of the k best positive scores per row, -1 padded."""
        ids = np.full((scores.shape[0], k), -1, dtype=np.int64)
        if k < scores.shape[1]:  # partial selection first: O(n) instead of a full sort per query
            part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
            vals = np.take_along_axis(scores, part, axis=1)
            order = np.take_along_axis(part, np.lexsort((part, -vals), axis=1), axis=1)
        else:
            order = np.argsort(-scores, axis=1, kind="stable")
        top = np.take_along_axis(scores, order, axis=1)
        ids[:, : order.shape[1]] = np.where(top > 0, order, -1)
        return ids
