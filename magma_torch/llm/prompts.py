"""The reader's answer prompts, versioned (``MagmaMemory.answer`` and magma-run's QA task).

The answer prompt is query-adaptive: its reasoning instructions are chosen by the intent the
classifier *predicted* for the question (``Retrieval.intent``), never by a dataset's
category. Change a prompt's text only together with its version string: run folders
record the versions they were produced with.
"""
from __future__ import annotations

from datetime import datetime

ANSWER_PROMPT_VERSION = "magma-answer-v2"
NOT_MENTIONED = "Not mentioned in the conversation."

INTENT_INSTRUCTIONS = {
    "WHY": ("This is a WHY question. The memory blocks are shown with causes before their effects. "
            "Explain the cause using that causal order: name the event or reason that led to what "
            "the question asks about, in one short sentence."),
    "WHEN": ("This is a WHEN question. Every memory block starts with the date it was said on. Resolve "
             "relative expressions (\"yesterday\", \"last week\", \"next month\") against the date of the "
             "block they appear in, not against today, and answer with an absolute date written in words "
             "(e.g. \"7 May 2023\", \"the week before 9 June 2023\", \"2022\"), never in digits: for a block "
             "dated [2023-05-08 13:56] that says \"yesterday\", answer \"7 May 2023\", not \"2023-05-07\"."),
    "ENTITY": ("This is a question about a fact, person, object or place. Answer with the concise fact "
               "itself (a name, a list of items, a number, yes/no), without explanation."),
}

ANSWER_TEMPLATE = """You answer questions about a long conversation between two people, using only the memory below.

Memory (one block per turn: [date time] (turn id) speaker: text):
{context}

{instructions}
Answer with the shortest phrase that answers the question (a few words, not a full sentence). Each block names who said it: if the question says a person did something that the memory shows only for someone else, or the memory does not contain the answer, reply exactly: {not_mentioned}

Question date: {date}
Question: {question}
Answer:"""


def format_date(t: datetime | None) -> str:
    return "unknown" if t is None else t.strftime("%d %B %Y, %H:%M")


def answer_prompt(question: str, context: str, intent: str, question_date: datetime | None = None) -> str:
    """The reader prompt for one question; ``intent`` is the predicted intent (WHY/WHEN/ENTITY)."""
    return ANSWER_TEMPLATE.format(context=context.strip() or "(empty)",
                                  instructions=INTENT_INSTRUCTIONS.get(intent, INTENT_INSTRUCTIONS["ENTITY"]),
                                  not_mentioned=NOT_MENTIONED, date=format_date(question_date),
                                  question=question)
