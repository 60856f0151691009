"""Question answering over retrieved contexts, and the LLM judge (task=qa).

Both run batched: one ``LLM.generate`` call per chunk of a conversation's questions. A failed
generation never stops a run: the answer is recorded as "" with its error, scores 0, and is
counted; a failed verdict is recorded as ``None`` (left out of the judge mean) and counted.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from magma_torch.eval.prompts import JUDGE_SCHEMA, judge_prompt
from magma_torch.eval.qa_metrics import bleu1, locomo_f1, reference_answer
from magma_torch.llm.answer_format import check_date_style, format_answer
from magma_torch.llm.base import LLM, Generation, checked_generate
from magma_torch.llm.prompts import DEFAULT_ANSWER_PROMPT, NOT_MENTIONED, answer_prompt
from magma_torch.llm.schema import OutputError, extract_json


class QuestionLike(Protocol):
    question: str
    query_time: datetime | None


@dataclass(frozen=True)
class Answer:
    prediction: str                    # "" when the generation failed; dates formatted (llm/answer_format.py)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    reader_text: str = ""              # the reader's own text, before formatting


@dataclass(frozen=True)
class Verdict:
    verdict: int | None                # 1 correct, 0 wrong, None when the judge failed or had no gold
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    called: bool = True                # False when no judge call was made for the item


def answer_questions(retrievals: Sequence, questions: Sequence[QuestionLike], reader: LLM, *,
                     max_tokens: int = 128, temperature: float = 0.0, dates: str = "words",
                     prompt: str = DEFAULT_ANSWER_PROMPT) -> list[Answer]:
    """Answer each question from its retrieval (context + predicted intent) in one batch, with the
    answer prompt version ``prompt``; the answers' dates are written in the style ``dates``
    (``format_answer``)."""
    if len(retrievals) != len(questions):
        raise ValueError(f"{len(retrievals)} retrievals for {len(questions)} questions")
    check_date_style(dates)   # a bad style, or (answer_prompt) a bad version, fails before the reader runs
    prompts = [answer_prompt(q.question, r.context, r.intent, q.query_time, prompt)
               for r, q in zip(retrievals, questions, strict=True)]
    gens = checked_generate(reader, prompts, max_tokens=max_tokens, temperature=temperature)
    texts = ["" if g.error else g.text.strip() for g in gens]
    return [Answer(format_answer(t, dates), g.prompt_tokens, g.completion_tokens, g.error, t)
            for t, g in zip(texts, gens, strict=True)]


def judge_reference(gold: str | None, category: str) -> str | None:
    """What the judge compares with: the gold answer (LoCoMo's first ';' part for
    open-domain), or "not mentioned" for LoCoMo's adversarial questions, whose gold is a trap.
    ``category`` may also be a LongMemEval judge kind (prompts.LONGMEMEVAL_JUDGE_KINDS)."""
    return NOT_MENTIONED if category == "adversarial" else reference_answer(gold, category)


def parse_verdict(g: Generation) -> tuple[int | None, str | None]:
    """The judge's 0/1 verdict, from its parsed output or else the first JSON object in its text
    (an unconstrained judge), or the reason there is none."""
    if g.error:
        return None, g.error
    obj = g.parsed
    if obj is None:
        try:
            obj = extract_json(g.text, lenient=True)
        except OutputError:
            obj = None
    v = obj.get("verdict") if isinstance(obj, dict) else None
    if isinstance(v, bool) or v in (0, 1):
        return int(v), None
    return None, f"unparsable verdict: {g.text[:80]!r}"


def judge_answers(judge: LLM, questions: Sequence[str], golds: Sequence[str | None], categories: Sequence[str],
                  answers: Sequence[Answer], *, max_tokens: int = 16) -> list[Verdict]:
    """One judge call for every answer that has a reference; temperature 0, JSON verdict.
    A failed answer is judged wrong without a call; a question without gold gets None."""
    out: list[Verdict | None] = [None] * len(answers)
    todo, prompts = [], []
    for i, (q, gold, cat, a) in enumerate(zip(questions, golds, categories, answers, strict=True)):
        ref = judge_reference(gold, cat)
        if ref is None:
            out[i] = Verdict(None, called=False)
        elif a.error is not None:
            out[i] = Verdict(0, called=False)
        else:
            todo.append(i)
            prompts.append(judge_prompt(q, ref, a.prediction, cat))
    gens = checked_generate(judge, prompts, schema=JUDGE_SCHEMA, max_tokens=max_tokens, temperature=0.0)
    for i, g in zip(todo, gens, strict=True):
        v, err = parse_verdict(g)
        out[i] = Verdict(v, g.prompt_tokens, g.completion_tokens, err)
    return out


def score_answer(prediction: str, gold: str | None, category: str, abstention: bool = False) -> dict:
    """LoCoMo F1 and BLEU-1 of one answer (BLEU-1 is None for adversarial questions). A LongMemEval
    ``abstention`` question (``_abs``) is scored as LoCoMo scores an adversarial one, 1 when the answer
    abstains, BLEU-1 None: its gold is an explanation of why the conversation cannot answer it, so
    word overlap with it rewarded answers that repeat its words over ones that abstain."""
    if abstention:
        return {"f1": locomo_f1(prediction, gold, "adversarial"), "bleu1": None}
    return {"f1": locomo_f1(prediction, gold, category), "bleu1": bleu1(prediction, reference_answer(gold, category))}
