"""Tests for the shipped query intent head and its training script."""
import json

import pytest
import torch
from safetensors.torch import load_file

from magma_torch.query.intent import INTENTS, IntentClassifier
from magma_torch.query.train_intent import default_data_path, embed, load_encoder, train
from magma_torch.testing import withDevices

# Hand-written for this test: names and phrasings that the shipped question set does not use.
HELD_OUT = {
    "WHY": [
        "Why did Gabriel turn his garage into a studio?",
        "What was the motivation for Olivia's career switch to nursing?",
        "What was it about the new town that made Viktor want to stay?",
        "Why on earth did Rosa agree to run the bake sale again?",
        "What's the explanation for Felix skipping his sister's graduation?",
        "Could you explain what got Imani interested in beekeeping?",
        "How come Theo stopped replying to the group chat?",
        "What caused the falling out between Aisha and her old bandmates?",
        "What reason did Pablo give for selling his motorcycle?",
        "Why has Greta been so tired lately?",
        "What made Hugo reconsider his move abroad?",
        "Was Sofia's decision to retire early driven by her health?",
    ],
    "WHEN": [
        "When did Gabriel finish building the treehouse?",
        "What year did Olivia and her husband move to the coast?",
        "How long has Viktor been playing chess competitively?",
        "Which month did Rosa host the neighbourhood barbecue?",
        "How many years ago did Felix learn to sail?",
        "Did Imani get her bees before or after the summer fair?",
        "When is Theo flying out to see his cousins?",
        "What date did Aisha's band play their reunion show?",
        "How long was Pablo away on his cycling tour?",
        "When did Greta last take a proper vacation?",
        "Which came first for Hugo, the new apartment or the new girlfriend?",
        "At what age did Sofia start swimming?",
    ],
    "ENTITY": [
        "What kind of bees does Imani keep?",
        "Who did Gabriel invite to the treehouse party?",
        "What city is Olivia's hospital in?",
        "Which chess openings does Viktor like to play?",
        "What did Rosa bake for the neighbourhood barbecue?",
        "What is the name of Felix's sailboat?",
        "Who is Theo's favourite cousin?",
        "What instruments were played at Aisha's reunion show?",
        "Would Pablo enjoy a mountain biking weekend?",
        "What does Greta do for a living?",
        "Where did Hugo and his girlfriend meet?",
        "What sports does Sofia follow on TV?",
    ],
}


@pytest.fixture(scope="module")
def encoder():
    return load_encoder()


@pytest.fixture(scope="module")
def clf():
    return IntentClassifier.load()


def test_held_out_questions_not_in_training_set():
    shipped = {json.loads(line)["question"].lower() for line in default_data_path().read_text().splitlines()}
    for qs in HELD_OUT.values():
        assert len(qs) >= 10
        assert not any(q.lower() in shipped for q in qs)


def test_held_out_accuracy(encoder, clf):
    questions = [q for qs in HELD_OUT.values() for q in qs]
    gold = [label for label, qs in HELD_OUT.items() for _ in qs]
    pred = clf.predict_labels(embed(questions, encoder))
    acc = sum(p == g for p, g in zip(pred, gold)) / len(gold)
    misses = [(q, g, p) for q, g, p in zip(questions, gold, pred) if p != g]
    assert acc >= 0.85, misses


def test_sidecar_metadata(clf):
    assert tuple(clf.meta["labels"]) == INTENTS
    assert clf.meta["training"]["val_accuracy"] >= 0.9


@withDevices
def test_predict_is_batched_on_input_device(encoder, clf, device):
    x = embed(["Why did Ana move?", "When did Ana move?", "Where did Ana move?", "Who helped Ana move?"], encoder)
    x = x.to(device)
    pred = clf.predict(x)
    assert pred.shape == (4,) and pred.dtype == torch.long and pred.device == x.device
    one_by_one = torch.cat([clf.predict(x[i : i + 1]) for i in range(len(x))])
    assert torch.equal(pred, one_by_one)
    assert clf.predict(x[:0]).shape == (0,)
    assert clf.predict_labels(x)[:3] == ["WHY", "WHEN", "ENTITY"]


def test_retraining_is_deterministic(encoder, tmp_path):
    rows = [json.loads(line) for line in default_data_path().read_text().splitlines()]
    subset = [r for label in INTENTS for r in [r for r in rows if r["intent"] == label][:8]]
    data = tmp_path / "tiny.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in subset))

    outs = [tmp_path / f"run{i}" / "head.safetensors" for i in range(2)]
    metas = [train(data, out, encoder=encoder, verbose=False, epochs=3, hidden=16, seed=7) for out in outs]

    a, b = (load_file(str(out)) for out in outs)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert metas[0]["training"]["n_examples"] == 24 and metas[0]["training"]["seed"] == 7
    loaded = IntentClassifier.load(str(outs[0]))
    assert loaded.meta["hidden"] == 16
    assert loaded.predict(torch.randn(5, 384)).shape == (5,)
