"""Tests for the shipped query intent head, its lead-word rules and its training script."""
import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from magma_torch.query.intent import INTENTS, IntentClassifier
from magma_torch.query.train_intent import (default_data_path, embed, load_config, load_encoder, load_questions,
                                            stratified_split, train)
from magma_torch.testing import with_dataset, with_devices

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


# Hand-written for this test in the style of questions about long chat histories (topical words that
# pull an embedding away from the question's form: trips, hobbies, feelings, dates). Not from LoCoMo.
CONVERSATIONAL = {
    "WHEN": [
        "When did Priscilla and her boyfriend go on the brewery tour in the hills?",
        "When did Osvaldo paint the mural of his grandmother?",
        "When is Marguerite going to the comic book convention with her nephew?",
        "When was Hollis's first pottery exhibition at the community centre?",
        "When did Tamsin adopt the three-legged beagle from the shelter?",
        "What year did Anselm and his wife start their food truck?",
        "In which month did Clementine run the charity 10K for the children's hospital?",
        "How long ago did Bartholomew get back into surfing?",
        "How long has Ottilie been volunteering with the literacy program?",
        "Which came first, Fenwick's trip to Iceland or his new job at the brewery?",
        "How many years has Ingrid been playing the cello in the orchestra?",
        "Around when did Leopold's family go camping by the lake?",
    ],
    "WHY": [
        "Why did Priscilla decide to take a break from the pottery studio?",
        "Why did Osvaldo feel so nervous about the art show?",
        "Why does Marguerite love collecting vintage postcards?",
        "What made Hollis give up his season tickets?",
        "What motivated Tamsin to start a support group for new parents?",
        "What inspired Anselm to write a cookbook about his grandmother's recipes?",
        "Why did Clementine and her sister stop speaking for a month?",
        "How come Bartholomew sold his surfboards last summer?",
        "What was the reason Ottilie turned down the scholarship?",
        "What prompted Fenwick to move back in with his parents?",
        "Why is Ingrid so passionate about animal rescue?",
        "What led Leopold to change his mind about the camping trip?",
    ],
    "ENTITY": [
        "What did Priscilla and her boyfriend bring back from the brewery tour?",
        "What colours did Osvaldo use for the mural of his grandmother?",
        "Who went with Marguerite to the comic book convention?",
        "What kind of pottery does Hollis make?",
        "What is the name of Tamsin's three-legged beagle?",
        "What dishes does Anselm's food truck serve?",
        "How many medals has Clementine won in charity runs?",
        "Would Bartholomew enjoy a week of sailing lessons?",
        "What does Ottilie like to read to the kids in the literacy program?",
        "Which bands does Fenwick listen to while brewing?",
        "What did Ingrid do last weekend after rehearsal?",
        "What games did Leopold's family play by the lake?",
    ],
}


def _accuracy(clf, encoder, questions_by_intent, with_text=False):
    questions = [q for qs in questions_by_intent.values() for q in qs]
    gold = [label for label, qs in questions_by_intent.items() for _ in qs]
    pred = clf.predict_labels(embed(questions, encoder), questions if with_text else None)
    misses = [(q, g, p) for q, g, p in zip(questions, gold, pred, strict=True) if p != g]
    return 1 - len(misses) / len(gold), misses


@pytest.fixture(scope="module")
def encoder():
    return load_encoder()


@pytest.fixture(scope="module")
def clf():
    return IntentClassifier.load()


def test_held_out_questions_not_in_training_set():
    shipped = {json.loads(line)["question"].lower() for line in default_data_path().read_text().splitlines()}
    for qs in [*HELD_OUT.values(), *CONVERSATIONAL.values()]:
        assert len(qs) >= 10
        assert not any(q.lower() in shipped for q in qs)


def test_held_out_accuracy(encoder, clf):
    acc, misses = _accuracy(clf, encoder, HELD_OUT)
    assert acc >= 0.9, misses


def test_head_alone_routes_conversational_questions(encoder, clf):
    """The learned head does the work without the rules: lead words included, text not passed."""
    acc, misses = _accuracy(clf, encoder, CONVERSATIONAL)
    assert acc >= 0.9, misses


def test_head_plus_rules_route_every_when_and_why_question(encoder, clf):
    acc, misses = _accuracy(clf, encoder, CONVERSATIONAL, with_text=True)
    assert not [m for m in misses if m[0].lower().startswith(("when ", "why "))], misses
    assert acc >= 0.94, misses


def test_rules_override_rows_only_where_a_lead_word_matches(encoder, clf):
    qs = ["when did Ana move?", "  Why was the café closed?", "When Ana moved, who helped her?",
          "What did Ana buy?", "Whenever Ana travels, what does she pack?", "Why?"]
    x = embed(qs, encoder)
    head = clf.probabilities(x)
    ruled = clf.probabilities(x, qs)
    assert ruled.shape == head.shape == (len(qs), len(INTENTS))
    assert torch.allclose(ruled.sum(-1), torch.ones(len(qs)))
    assert ruled[0].tolist() == [0.0, 1.0, 0.0] and ruled[1].tolist() == [1.0, 0.0, 0.0] and ruled[5][0] == 1.0
    # no auxiliary after "When" (a clause, not a time question), "Whenever", no lead word: the head's rows
    assert torch.equal(ruled[2:5], head[2:5])
    with pytest.raises(ValueError):
        clf.probabilities(x, qs[:2])
    no_rules = IntentClassifier(clf.head, {**clf.meta, "rules": {}})
    assert torch.equal(no_rules.probabilities(x, qs), head)


def test_sidecar_metadata(clf):
    assert tuple(clf.meta["labels"]) == INTENTS
    assert clf.meta["rules"] == load_config()["rules"]
    training = clf.meta["training"]
    assert training["val_accuracy"] >= 0.95 and training["n_val"] >= 500
    assert training["n_examples"] == training["n_train"] + training["n_val"]


def test_validation_holds_whole_templates_aside():
    _, y, groups = load_questions(default_data_path())
    cfg = load_config()
    tr, va = stratified_split(y, cfg["val_fraction"], cfg["seed"], groups)
    assert not {groups[i] for i in tr.tolist()} & {groups[i] for i in va.tolist()}
    assert len(tr) + len(va) == len(y) and all((y[va] == c).any() for c in range(len(INTENTS)))


def _eval_dev():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments" / "intent"))
    import eval_dev
    return eval_dev


@with_dataset(_eval_dev().DEV)
def test_training_set_holds_no_dev_question():
    eval_dev = _eval_dev()
    shipped = {json.loads(line)["question"].lower() for line in default_data_path().read_text().splitlines()}
    assert not shipped & {r["question"].lower() for r in eval_dev.dev_questions(eval_dev.DEV)}


@with_dataset(_eval_dev().DEV)
def test_dev_routing(encoder):
    eval_dev = _eval_dev()
    res = eval_dev.evaluate(encoder=encoder)
    for name in ("when", "why"):
        assert res[name]["routed"] / res[name]["n"] >= 0.97, res[name]["misses"]
        assert res[name]["head"] / res[name]["n"] >= 0.9, name  # the head alone, no rules
    assert res["other100"]["n"] == 100 and res["other100"]["routed"] >= 85, res["other100"]["misses"]


@with_devices
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
