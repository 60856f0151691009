"""Property-based tests (hypothesis): the temporal normaliser, the dataset loader, the fast
path's all-or-nothing batches and random add / consolidate / checkpoint / crash / reopen /
retrieve sequences on a durable store keep their promises."""
import datetime as dt
import itertools
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from magma_torch import MagmaMemory
from magma_torch.config import load_group
from magma_torch.eval.datasets import DatasetError, load_locomo
from magma_torch.eval.datasets.demo import DEMO_FILE
from magma_torch.ingest.fast_path import IngestError
from magma_torch.testing import abandon
from magma_torch.text.embedder import Embedder
from magma_torch.text.temporal import parse_timestamp, question_time_window, resolve_dates

# Derandomized and without an example database: the same examples every run, nothing written.
FAST = settings(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)
DATE_WORDS = ["yesterday", "today", "tomorrow", "last", "next", "this", "week", "weekend", "month", "year", "ago",
              "in", "on", "the", "May", "June", "December", "Monday", "Friday", "summer", "winter", "Christmas",
              "2022", "1999", "3000", "31", "29", "February", "days", "years", "from", "now", "before", "after",
              "2 weeks ago", "9999 years", "early", "late", "mid", "of", "-5", "0", "1/2/2023", "\x00", "☕"]
MAX_YEARS_AWAY = 1000  # how far a resolved date may lie from its reference when the text names no such year
DEMO = json.loads(DEMO_FILE.read_text())


@pytest.fixture(scope="module")
def embedder():
    return Embedder()


date_texts = st.one_of(st.text(max_size=60), st.lists(st.sampled_from(DATE_WORDS), max_size=8).map(" ".join))
references = st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31))


@settings(FAST, max_examples=300)
@given(text=date_texts, reference=references)
def test_temporal_normaliser_never_crashes_and_stays_in_bounds(text, reference):
    for d in resolve_dates(text, reference):
        assert d.start <= d.end and d.expression and d.expression in text
        named_year = str(d.start.year) in text or str(d.end.year) in text
        assert named_year or abs(d.start.year - reference.year) <= MAX_YEARS_AWAY, (d, reference)
        assert d.granularity in ("day", "week", "month", "season", "year")
    window = question_time_window(text, reference)
    assert window is None or window[0] <= window[1]


@settings(FAST, max_examples=200)
@given(value=st.one_of(st.text(max_size=40), st.floats(), st.integers(), st.none(), st.booleans(),
                       st.lists(st.integers(), max_size=2)))
def test_parse_timestamp_parses_or_raises_value_error(value):
    try:
        out = parse_timestamp(value)
    except ValueError:
        return
    assert isinstance(out, dt.datetime)


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids,
                                                                                     max_size=3), max_leaves=6)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


ALL_PATHS = [p for p in _paths(DEMO) if p]


@st.composite
def malformed_files(draw):
    """The demo LoCoMo file with a few values replaced, keys deleted, or its text cut/garbled."""
    data = json.loads(json.dumps(DEMO))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(ALL_PATHS))
        parent = data
        try:
            for k in path[:-1]:
                parent = parent[k]
            if draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = draw(json_values)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier mutation removed this path
    text = json.dumps(data)
    cut = draw(st.sampled_from(["none", "truncate", "garble"]))
    if cut == "truncate":
        text = text[: draw(st.integers(0, len(text) - 1))]
    elif cut == "garble":
        i = draw(st.integers(0, len(text) - 1))
        text = text[:i] + draw(st.text(min_size=1, max_size=4)) + text[i:]
    return text


@settings(FAST, max_examples=120)
@given(text=malformed_files())
def test_loader_gives_samples_or_a_clear_error(text):
    with tempfile.TemporaryDirectory() as d:
        file = Path(d) / "locomo.json"
        file.write_text(text)
        try:
            samples = load_locomo(file)
        except DatasetError as err:
            assert str(file) in str(err)
            return
    for s in samples:  # what loads is well-formed
        assert s.sample_id and all(isinstance(t.text, str) and isinstance(t.timestamp, dt.datetime) for t in s.turns)


# Mostly valid fields, so that whole batches pass as well as fail; one bad field fails its batch.
good_text = st.text(min_size=1, max_size=30).filter(str.strip)
records_strategy = st.lists(st.fixed_dictionaries(
    {"text": st.one_of(good_text, good_text, good_text, st.sampled_from(["", "  ", None, 3])),
     "timestamp": st.one_of(st.sampled_from(["2024-01-02", "2024-03-04 10:00", "2030-05-06T07:08:09+02:00"]),
                            st.sampled_from(["2024-01-02", "2025-12-31 23:59", 1.7e9]),
                            st.sampled_from(["not a date", "", None, 10**20, "2024-02-30"]))},
    optional={"speaker": st.one_of(st.text(max_size=5), st.none()),
              "source_id": st.sampled_from(["a", "b", "c", None]),
              "stream": st.sampled_from(["s1", "s2", "s3"]),
              "metadata": st.one_of(st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
                                    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.just("x"))}), min_size=1, max_size=4).map(
    lambda recs: recs if len(recs) < 4 else recs[:3] + [{**recs[3], "bogus": 1}])  # an unknown field, now and then


EXAMPLES = itertools.count()


@pytest.fixture(scope="module")
def shared_memory(embedder):
    cfg = load_group("memory", "magma")
    cfg.slow_path.background = False
    with MagmaMemory(cfg, "none", embedder=embedder) as mem:
        yield mem


@settings(FAST, max_examples=60)
@given(batch=records_strategy)
def test_fast_path_batches_are_all_or_nothing(shared_memory, batch):
    mem = shared_memory  # one memory across examples: each batch meets whatever earlier ones left
    # Streams fresh to this example (except for the default one), so most refusals come from
    # the batch itself rather than from a later timestamp an earlier example left in a stream.
    n = next(EXAMPLES)
    batch = [{**r, "stream": f"{r['stream']}-{n}"} if "stream" in r else r for r in batch]
    before = (mem.stats(), list(mem.store.events.rows))
    try:
        ids = mem.add_many(batch)
    except IngestError as err:
        event("refused")
        assert str(err).startswith("record ")
        assert (mem.stats(), list(mem.store.events.rows)) == before  # never a partial batch
    else:
        event("accepted")
        assert len(ids) == len(batch) and all(0 <= i < len(mem.store) for i in ids)
    mem.check()


class DurableMemoryMachine(RuleBasedStateMachine):
    """Random add / consolidate / checkpoint / crash+reopen / retrieve sequences on a durable
    store: after every step the store passes ``check()`` and holds every acknowledged event."""

    embedder = None

    @initialize()
    def open(self):
        self.dir = tempfile.mkdtemp()
        self.acked: set[str] = set()
        self.n = 0
        self.mem = self._open()

    def _open(self):
        cfg = load_group("memory", "magma")
        cfg.slow_path.background = False
        cfg.slow_path.batch_size = 4
        cfg.durability.checkpoint_every = 5
        return MagmaMemory(cfg, store_dir=self.dir, durable=True, embedder=self.embedder)

    @rule(k=st.integers(1, 4), words=st.lists(st.sampled_from(["Ann", "hiking", "because", "rain", "so", "Bob",
                                                               "guitar", "lake"]), min_size=1, max_size=6))
    def add(self, k, words):
        recs = []
        for j in range(k):
            self.n += 1
            recs.append({"text": " ".join(words) + f" {self.n}", "speaker": words[0],
                         "timestamp": (dt.datetime(2024, 1, 1) + dt.timedelta(hours=self.n)).isoformat(),
                         "source_id": f"e{self.n}", "stream": f"s{self.n % 2}"})
        self.mem.add_many(recs)
        self.acked.update(r["source_id"] for r in recs)

    @rule()
    def consolidate(self):
        self.mem.consolidate()

    @rule()
    def checkpoint(self):
        self.mem.checkpoint()

    @rule()
    def crash_and_reopen(self):
        abandon(self.mem)
        self.mem = self._open()

    @precondition(lambda self: self.n > 0)
    @rule(question=st.sampled_from(["Why did Ann go hiking?", "When was the rain?", "Who has a guitar?"]))
    def retrieve(self, question):
        r = self.mem.retrieve(question)
        assert r.nodes and all(0 <= n.id < len(self.mem.store) for n in r.nodes)

    @invariant()
    def sound(self):
        self.mem.check()
        assert self.acked <= set(self.mem.store.events.by_source)

    def teardown(self):
        self.mem.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def test_durable_store_keeps_its_invariants_under_random_operations(embedder):
    DurableMemoryMachine.embedder = embedder
    DurableMemoryMachine.TestCase.settings = settings(FAST, max_examples=5, stateful_step_count=10)
    DurableMemoryMachine.TestCase().runTest()
