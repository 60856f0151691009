"""The reader's answer prompts, versioned (``MagmaMemory.answer`` and magma-run's QA task).

The answer prompt is query-adaptive: its reasoning instructions are chosen by the intent the
classifier *predicted* for the question (``Retrieval.intent``), never by a dataset's
category. Change a prompt's text only together with its version string: run folders
record the versions they were produced with.
"""
from __future__ import annotations

from datetime import datetime

from magma_torch.errors import MagmaError

DEFAULT_ANSWER_PROMPT = "magma-answer-v2"
NOT_MENTIONED = "Not mentioned in the conversation."

_WHEN_V2 = ("This is a WHEN question. Every memory block starts with the date it was said on. Resolve "
            "relative expressions (\"yesterday\", \"last week\", \"next month\") against the date of the "
            "block they appear in, not against today, and answer with an absolute date written in words "
            "(e.g. \"7 May 2023\", \"the week before 9 June 2023\", \"2022\"), never in digits: for a block "
            "dated [2023-05-08 13:56] that says \"yesterday\", answer \"7 May 2023\", not \"2023-05-07\".")
INTENT_INSTRUCTIONS = {
    "WHY": ("This is a WHY question. The memory blocks are shown with causes before their effects. "
            "Explain the cause using that causal order: name the event or reason that led to what "
            "the question asks about, in one short sentence."),
    "WHEN": _WHEN_V2,
    "ENTITY": ("This is a question about a fact, person, object or place. Answer with the concise fact "
               "itself (a name, a list of items, a number, yes/no), without explanation."),
}

_TEMPLATE = """You answer questions about a long conversation between two people, using only the memory below.

Memory (one block per turn: [date time] (turn id) speaker: text):
{{context}}

{{instructions}}
{rules}

Question date: {{date}}
Question: {{question}}
Answer:"""

_RULES_V2 = ("Answer with the shortest phrase that answers the question (a few words, not a full sentence). "
             "Each block names who said it: if the question says a person did something that the memory shows "
             "only for someone else, or the memory does not contain the answer, reply exactly: {not_mentioned}")
# v3, from the 1.5B reader's misses on conv-26 (experiments/results/qa_small/judge_audit.md): "last year"
# answered with the block's own date; "Would X likely ..." answered "not mentioned" (10 of 13
# open-domain questions); the other speaker's fact given for 38 of 47 questions about the wrong person.
_RULES_V3 = ("Answer with the shortest phrase that answers the question (a few words, not a full sentence); "
             "where it asks for several things, name all of them. "
             "If the question asks what someone would likely do, like or be, infer it from what the memory "
             "says about them and answer \"Likely yes\" or \"Likely no\" with a few words of reason. "
             "Each block names who said it, and a speaker's \"I\", \"my\" and \"me\" mean that speaker: "
             "before answering, check that the block you answer from is about the person the question names. "
             "If the memory shows it only for the other person, or does not contain the answer, reply "
             "exactly: {not_mentioned}")
_WHEN_V3 = _WHEN_V2 + (" \"Last year\" in a block dated 2023 means \"2022\"; \"last week\" in a block dated "
                       "[2023-06-09 10:00] means \"the week before 9 June 2023\".")

# version -> (template, instructions by intent); a run folder records the version it used
ANSWER_PROMPTS = {
    "magma-answer-v2": (_TEMPLATE.format(rules=_RULES_V2), INTENT_INSTRUCTIONS),
    "magma-answer-v3": (_TEMPLATE.format(rules=_RULES_V3), {**INTENT_INSTRUCTIONS, "WHEN": _WHEN_V3}),
}


class UnknownPromptError(MagmaError, ValueError):
    """An answer prompt version that does not exist."""


def check_answer_prompt(version: str) -> None:
    if version not in ANSWER_PROMPTS:
        raise UnknownPromptError(f"unknown answer prompt {version!r} (task.answer_prompt; known: "
                                 f"{', '.join(ANSWER_PROMPTS)})")


def format_date(t: datetime | None) -> str:
    return "unknown" if t is None else t.strftime("%d %B %Y, %H:%M")


def answer_prompt(question: str, context: str, intent: str, question_date: datetime | None = None,
                  version: str = DEFAULT_ANSWER_PROMPT) -> str:
    """The reader prompt for one question; ``intent`` is the predicted intent (WHY/WHEN/ENTITY)."""
    check_answer_prompt(version)
    template, instructions = ANSWER_PROMPTS[version]
    return template.format(context=context.strip() or "(empty)",
                           instructions=instructions.get(intent, instructions["ENTITY"]),
                           not_mentioned=NOT_MENTIONED, date=format_date(question_date), question=question)
