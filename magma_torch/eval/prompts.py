"""Versioned prompts of the LLM judge (the reader's answer prompts: ``magma_torch.llm.prompts``).

Change a prompt's text only together with its version string: run folders record the
versions they were produced with.
"""
from __future__ import annotations

from magma_torch.eval.datasets.longmemeval import QUESTION_TYPES

JUDGE_PROMPT_VERSION = "locomo-judge-v1"
LONGMEMEVAL_JUDGE_PROMPT_VERSION = "longmemeval-judge-v1"

JUDGE_TEMPLATE = """You grade an answer to a question about a conversation against a gold answer.

Question: {question}
Gold answer: {gold}
Generated answer: {prediction}

Be generous about wording and length: the generated answer is correct (1) when it states the same thing as the gold answer or contains it, even with extra detail. A date, month or period is correct when it refers to the same time as the gold answer, whatever its format. It is wrong (0) when it contradicts the gold answer, misses its key content, or says the information is not available while the gold answer gives it. If the gold answer says the information is not mentioned, the generated answer is correct only if it also says so.

Respond with JSON only: {{"verdict": 1}} if correct, {{"verdict": 0}} if wrong."""

JUDGE_SCHEMA = {"type": "object", "properties": {"verdict": {"type": "integer", "enum": [0, 1]}},
                "required": ["verdict"], "additionalProperties": False}


LONGMEMEVAL_JUDGE_KINDS = (*QUESTION_TYPES, "abstention")
# LongMemEval: one grading rule per question type; "abstention" is any "_abs" question, whose
# gold is an explanation of why the question cannot be answered.
_LME_RULES = {
    "default": ("The generated answer is correct (1) when it states the gold answer or something equivalent, "
                "even with extra detail; it is wrong (0) when it contradicts the gold answer, misses its key "
                "content or only gives part of a multi-part answer."),
    "temporal-reasoning": ("The generated answer is correct (1) when it states the gold answer or something "
                           "equivalent. Do not penalise off-by-one errors in counts of days, weeks or months: if "
                           "the question asks how many days (weeks, months...) and the generated count differs "
                           "from the gold count by one (e.g. 19 days for 18 days), it is still correct. Otherwise "
                           "it is wrong (0)."),
    "knowledge-update": ("The gold answer is the most recent, updated information. The generated answer is "
                         "correct (1) when it gives the updated answer, even if it also mentions earlier "
                         "information as long as the updated answer is the one it gives as current. It is wrong "
                         "(0) when it gives only outdated information or the wrong current answer."),
    "single-session-preference": ("The gold answer is a rubric describing the personalised response the user "
                                  "would want. The generated answer is correct (1) when it satisfies the rubric, "
                                  "using the user's stated preferences; it need not cover every point of the "
                                  "rubric. It is wrong (0) when it ignores or contradicts those preferences."),
    "abstention": ("This question cannot be answered from the conversation; the gold answer explains why. The "
                   "generated answer is correct (1) when it says the question cannot be answered, or that the "
                   "information was not mentioned or is incomplete. It is wrong (0) when it answers the "
                   "question as if the information were known."),
}

LONGMEMEVAL_JUDGE_TEMPLATE = """You grade an answer to a question about a user's past chats with an assistant against a gold answer.

Question: {question}
Gold answer: {gold}
Generated answer: {prediction}

{rule}

Respond with JSON only: {{"verdict": 1}} if correct, {{"verdict": 0}} if wrong."""


def judge_prompt(question: str, gold: str, prediction: str, kind: str | None = None) -> str:
    """The judge prompt; ``kind`` is a LongMemEval question type or "abstention" (their own
    rules), anything else (LoCoMo's categories, None) gets the LoCoMo judge."""
    prediction = prediction or "(no answer)"
    if kind in LONGMEMEVAL_JUDGE_KINDS:
        return LONGMEMEVAL_JUDGE_TEMPLATE.format(question=question, gold=gold, prediction=prediction,
                                                 rule=_LME_RULES.get(kind, _LME_RULES["default"]))
    return JUDGE_TEMPLATE.format(question=question, gold=gold, prediction=prediction)


def judge_prompt_version(dataset: str) -> str:
    return LONGMEMEVAL_JUDGE_PROMPT_VERSION if dataset.startswith("longmemeval") else JUDGE_PROMPT_VERSION
