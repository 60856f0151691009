"""Token counting shared by every memory, so context budgets compare like with like."""
import re

_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Words and punctuation marks: close to a BPE count for English and model-free."""
    return len(_TOKEN.findall(text))
