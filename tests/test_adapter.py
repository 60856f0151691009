"""The question adapter (query/adapter.py): the map it applies, its fit, the bundled weights against
the report that fitted them, and the settings that choose it."""
from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
import torch

from magma_torch import MagmaError, MagmaMemory
from magma_torch.query.adapter import BUNDLED, QuestionAdapter, fit
from magma_torch.testing import experiment_script, with_package
from magma_torch.text.embedder import Embedder

REPORT = Path(__file__).parents[1] / "experiments/results/adapter/locomo_dev.json"
TURNS = ["I adopted a beagle puppy named Max.", "My violin lesson starts at noon.",
         "I bought a clarinet for the band.", "The orchestra plays in Boston next month."]


def test_identity_map_leaves_questions_as_they_are():
    q = torch.nn.functional.normalize(torch.randn(5, 8), dim=1)
    assert torch.allclose(QuestionAdapter(torch.eye(8))(q), q, atol=1e-6)


def test_map_is_applied_and_renormalised():
    w = torch.diag(torch.tensor([2.0, 0.0, 1.0]))
    out = QuestionAdapter(w)(torch.tensor([[0.6, 0.8, 0.0]]))
    assert torch.allclose(out, torch.tensor([[1.0, 0.0, 0.0]]))


def test_fit_moves_questions_toward_their_evidence():
    """Questions whose evidence lies along a direction they do not point at: after the fit each
    question's evidence ranks first among its conversation's turns, which it did not before."""
    g = torch.Generator().manual_seed(0)
    dim, n = 16, 40
    events = torch.nn.functional.normalize(torch.randn(n, dim, generator=g), dim=1)
    rot = torch.linalg.qr(torch.randn(dim, dim, generator=g))[0]     # questions are a rotation of their evidence
    evidence = [[i] for i in range(n)]
    questions = events @ rot.T
    conv = [(events, questions, evidence)]
    before = (questions @ events.T).argmax(dim=1)
    w = fit(conv, l2=0.0, temperature=0.05, epochs=300, lr=1e-2)
    after = (QuestionAdapter(w)(questions) @ events.T).argmax(dim=1)
    assert (before == torch.arange(n)).float().mean() < 0.5
    assert (after == torch.arange(n)).all()


def test_l2_keeps_the_map_near_the_identity():
    g = torch.Generator().manual_seed(1)
    events = torch.nn.functional.normalize(torch.randn(20, 8, generator=g), dim=1)
    questions = torch.nn.functional.normalize(torch.randn(20, 8, generator=g), dim=1)
    conv = [(events, questions, [[i] for i in range(20)])]
    loose = fit(conv, l2=0.0, temperature=0.05, epochs=100, lr=1e-2)
    tight = fit(conv, l2=10.0, temperature=0.05, epochs=100, lr=1e-2)
    eye = torch.eye(8)
    assert (tight - eye).norm() < 0.2 * (loose - eye).norm()


def test_fit_accepts_inference_mode_embeddings():
    with torch.inference_mode():
        events = torch.nn.functional.normalize(torch.randn(6, 4), dim=1)
        questions = events.clone()
    w = fit([(events, questions, [[0], [1, 2], [], [3], [4], [5]])], l2=0.1, temperature=0.1, epochs=2, lr=1e-3)
    assert w.shape == (4, 4) and not w.requires_grad


def test_save_load_round_trip(tmp_path):
    w = torch.randn(6, 6)
    QuestionAdapter(w, {"fit": {"l2": 0.1}}).save(tmp_path / "a.safetensors")
    back = QuestionAdapter.load(str(tmp_path / "a.safetensors"))
    assert torch.equal(back.weight, w) and back.meta == {"fit": {"l2": 0.1}}


def test_bad_files_name_the_setting(tmp_path):
    with pytest.raises(MagmaError, match="retrieval.question_adapter: no file"):
        QuestionAdapter.load(str(tmp_path / "missing.safetensors"))
    from safetensors.torch import save_file

    save_file({"other": torch.eye(3)}, str(tmp_path / "x.safetensors"))
    with pytest.raises(MagmaError, match="no 'weight'"):
        QuestionAdapter.load(str(tmp_path / "x.safetensors"))
    with pytest.raises(MagmaError, match=r"square \[d, d\]"):
        QuestionAdapter(torch.zeros(3, 4))


def test_bundled_map_is_the_reports_fit():
    """The shipped map for all-MiniLM-L6-v2 is the one the committed report describes, near the
    identity as its l2 keeps it, and it changes question vectors (it is not the identity)."""
    a = QuestionAdapter.load(BUNDLED)
    report = json.loads(REPORT.read_text())
    assert a.dim == 384 and a.meta["fit"] == report["fit"] and a.meta["embedder_path"] == "bundled"
    off = (a.weight - torch.eye(384)).norm().item()
    assert 0.1 < off < 0.5 * torch.eye(384).norm().item()
    held = report["cross_validation"]["memories"]["magma"]
    assert held["adapter"]["overall"]["recall_all@2000tok"] > held["none"]["overall"]["recall_all@2000tok"]


@pytest.fixture(scope="module")
def emb():
    return Embedder(device="cpu")


def test_retrieval_compares_adapted_questions_and_the_intent_head_reads_raw_ones(emb):
    """With a map that reverses the question, the dense ranking turns over; the intent stays the
    one the raw embedding gives."""
    cfg = {"slow_path": {"background": False}, "retrieval": {"question_adapter": None}}
    with MagmaMemory(cfg, "none", device="cpu", embedder=emb) as plain:
        plain.add_many([{"text": t, "timestamp": 1_700_000_000 + 60 * i} for i, t in enumerate(TURNS)])
        snap = plain.store.snapshot()
        ret, question = plain.retriever, ["Which instruments do you play?"]
        raw, q = ret.embed_questions(question, snap.embeddings.device)
        assert torch.equal(raw, q)
        before = ret.retrieve_batch(snap, question, [None])[0]
        ret.adapter = QuestionAdapter(-torch.eye(384))
        raw2, q2 = ret.embed_questions(question, snap.embeddings.device)
        assert torch.equal(raw2, raw) and torch.allclose(q2, -raw, atol=1e-6)
        after = ret.retrieve_batch(snap, question, [None])[0]
        assert after.intent_probs == before.intent_probs      # the head read the raw embedding both times
        assert after.anchors[0].id != before.anchors[0].id    # the comparison with events read the reversed one


class OtherModel:
    """Another model's space: the bundled model's vectors, reversed and cut to 256 dimensions."""
    model_path = "another-model"

    def __init__(self, base: Embedder):
        self.base, self.dim, self.device, self.max_seq_length = base, 256, base.device, base.max_seq_length

    def encode(self, texts):
        return torch.nn.functional.normalize(self.base.encode(texts)[:, :256].flip(1), dim=1)

    def count_tokens(self, texts):
        return self.base.count_tokens(texts)


def test_with_another_embedder_the_intent_head_reads_the_model_it_was_trained_on(emb):
    """embedder.model set to another model (another width here) crashed every retrieval in the
    intent head; the head now embeds the questions with its own model, so the intents are the
    default memory's."""
    questions = ["Why did you adopt a puppy?", "When does the violin lesson start?", "Which instruments do you play?"]
    cfg = {"slow_path": {"background": False}, "retrieval": {"question_adapter": None}}
    with MagmaMemory(cfg, "none", device="cpu", embedder=emb) as plain, \
            MagmaMemory(cfg, "none", device="cpu", embedder=OtherModel(emb)) as other:
        assert plain.retriever.intent_embedder is emb and other.retriever.intent_embedder is not other.embedder
        got = {}
        for name, m in (("plain", plain), ("other", other)):
            m.add_many([{"text": t, "timestamp": 1_700_000_000 + 60 * i} for i, t in enumerate(TURNS)])
            got[name] = m.retrieve_batch(questions)
    for a, b in zip(got["plain"], got["other"], strict=True):
        assert a.intent == b.intent and a.intent_probs == pytest.approx(b.intent_probs, abs=1e-5)
    assert [r.intent for r in got["other"]] == ["WHY", "WHEN", "ENTITY"]
    assert got["other"][2].nodes       # and the other model's vectors rank the events


def test_default_memory_uses_the_bundled_map_and_baselines_do_not(emb):
    with MagmaMemory(None, "none", device="cpu", embedder=emb) as m:
        assert m.retriever.adapter is not None and m.retriever.adapter.dim == 384
    for name in ("magma_paper", "hybrid_rag", "vector_rag", "bm25", "magma_no_adapter"):
        with MagmaMemory(name, "none", device="cpu", embedder=emb) as m:
            assert m.retriever.adapter is None, name


def test_a_map_for_another_embedder_fails_at_construction(emb, tmp_path):
    QuestionAdapter(torch.eye(8)).save(tmp_path / "a8.safetensors")
    with pytest.raises(MagmaError, match="8-d questions, the embedder gives 384-d"):
        MagmaMemory({"retrieval": {"question_adapter": str(tmp_path / "a8.safetensors")}}, "none", device="cpu",
                    embedder=emb)

    class Other:
        dim, model_path = 384, "/models/another-384d-model"
    from magma_torch.query.retriever import Retriever
    from magma_torch.config.schema import RetrievalConfig

    with pytest.raises(MagmaError, match="bundled: no map ships for the embedder /models/another-384d-model"):
        Retriever(Other(), None, RetrievalConfig())
    minilm_map = str(resources.files("magma_torch.query") / "data" / "question_adapter.safetensors")
    with pytest.raises(MagmaError, match="fitted for the bundled all-MiniLM-L6-v2, the embedder is /models/another"):
        Retriever(Other(), None, RetrievalConfig(question_adapter=minilm_map))


class Mpnet:
    """Stands for all-mpnet-base-v2 built by `make models` wherever it lies: only its folder name and width count."""
    dim, model_path = 768, "/somewhere/models/all-mpnet-base-v2"


def test_bundled_picks_the_map_shipped_for_the_configured_embedder():
    from magma_torch.config.schema import RetrievalConfig
    from magma_torch.query.retriever import Retriever

    ret = Retriever(Mpnet(), None, RetrievalConfig())
    assert ret.adapter.dim == 768 and ret.adapter.meta["embedder"] == "all-mpnet-base-v2"
    report = json.loads((REPORT.parent / "locomo_dev_all-mpnet-base-v2.json").read_text())
    assert ret.adapter.meta["fit"] == report["fit"]
    assert Retriever(None, None, RetrievalConfig()).adapter.dim == 384     # no embedder: the bundled model's


def test_a_map_fitted_for_one_model_is_refused_for_another(tmp_path):
    from magma_torch.config.schema import RetrievalConfig
    from magma_torch.query.retriever import Retriever

    QuestionAdapter(torch.eye(768), {"embedder_path": "models/all-mpnet-base-v2"}).save(tmp_path / "m.safetensors")

    class OtherWide:
        dim, model_path = 768, "/models/another-768d-model"
    with pytest.raises(MagmaError, match="fitted for models/all-mpnet-base-v2, the embedder is /models/another-768d"):
        Retriever(OtherWide(), None, RetrievalConfig(question_adapter=str(tmp_path / "m.safetensors")))
    assert Retriever(Mpnet(), None, RetrievalConfig(question_adapter=str(tmp_path / "m.safetensors"))).adapter


def test_a_missing_model_folder_is_a_config_error_naming_it(tmp_path):
    with pytest.raises(MagmaError, match=r"embedder.model: cannot load .*nope \(no such folder.*make models"):
        Embedder(str(tmp_path / "nope"), device="cpu")


def test_memories_with_another_embedder_share_one_encoder_for_the_intent_head(emb):
    """magma-run builds a memory, and so an intent classifier, per conversation: the bundled model the
    head reads is loaded once per device for all of them, not once per memory."""
    from magma_torch.config.schema import RetrievalConfig
    from magma_torch.query.intent import IntentClassifier
    from magma_torch.query.retriever import Retriever

    cfg = RetrievalConfig(question_adapter=None)
    first, second = (Retriever(OtherModel(emb), IntentClassifier.load(device="cpu"), cfg) for _ in range(2))
    assert first.intent is not second.intent and first.intent_embedder is second.intent_embedder


@with_package("sklearn", extra="train")
def test_the_cross_validation_script_takes_settings_over_the_memory_and_refuses_an_unknown_one(monkeypatch, tmp_path):
    """experiments/train_question_adapter.py --set: the held-out figures of a setting come from the
    same script; a misspelt or mistyped setting stops it in one line before anything is built."""
    import subprocess
    import sys

    from magma_torch.config.resolve import memory_config

    root = Path(__file__).resolve().parents[1]
    monkeypatch.syspath_prepend(str(root / "experiments"))   # the script imports its siblings
    script = experiment_script(root / "experiments" / "train_question_adapter.py")
    cfg = script.with_settings(memory_config("magma"),
                               ["retrieval.anchor_k=40", "retrieval.signal_weights.speaker=1.0"])
    assert (cfg.retrieval.anchor_k, cfg.retrieval.signal_weights.speaker) == (40, 1.0)
    assert cfg.retrieval.beam == memory_config("magma").retrieval.beam        # the rest as configured
    for setting, why in [("retrieval.anchr_k=40", "Key 'anchr_k' not in 'RetrievalConfig'"),
                         ("retrieval.anchor_k=many", "Value 'many' of type 'str' could not be converted to Integer")]:
        proc = subprocess.run([sys.executable, str(root / "experiments" / "train_question_adapter.py"),
                               str(tmp_path / "absent.json"), "--out", str(tmp_path / "cv.json"), "--set", setting],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines()[-1] == f"train_question_adapter.py: error: --set: {why}"
        assert not (tmp_path / "cv.json").exists()


def test_the_bundled_model_by_another_spelling_of_its_path_is_the_bundled_model(tmp_path):
    """embedder.model set to the bundled folder with a trailing slash, or to a symlink to it, gets the
    bundled map and the intent head reads the memory's own embedder; a trailing slash on mpnet's
    folder still finds its map by name."""
    # before: the bundled path was compared as a string: a ConfigError 'no map ships for the embedder
    # .../model/ (maps ship for all-MiniLM-L6-v2 ...)', and with the map null the head loaded a second copy
    from magma_torch.config.schema import RetrievalConfig
    from magma_torch.query.intent import IntentClassifier
    from magma_torch.query.retriever import Retriever
    from magma_torch.text.embedder import bundled_model_path

    (tmp_path / "all-MiniLM-L6-v2").symlink_to(bundled_model_path())
    for spelling in (bundled_model_path() + "/", str(tmp_path / "all-MiniLM-L6-v2")):
        class Bundled:
            dim, model_path, device = 384, spelling, torch.device("cpu")
        ret = Retriever(Bundled(), IntentClassifier.load(device="cpu"), RetrievalConfig())
        assert ret.adapter.dim == 384 and ret.intent_embedder is ret.embedder, spelling
        ret = Retriever(Bundled(), IntentClassifier.load(device="cpu"), RetrievalConfig(question_adapter=None))
        assert ret.intent_embedder is ret.embedder, spelling

    class MpnetSlash:
        dim, model_path = 768, Mpnet.model_path + "/"
    assert Retriever(MpnetSlash(), None, RetrievalConfig()).adapter.meta["embedder"] == "all-mpnet-base-v2"
