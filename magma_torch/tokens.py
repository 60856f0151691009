"""Token counting shared by every memory, so context budgets compare like with like."""
import re

_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Words and punctuation marks: close to a BPE count for English and model-free."""
    return len(_TOKEN.findall(text))


def first_tokens(text: str, n: int) -> str:
    """The start of ``text`` that holds its first ``n`` tokens (as ``count_tokens`` counts them)."""
    if n <= 0:
        return ""
    for k, m in enumerate(_TOKEN.finditer(text), 1):
        if k == n:
            return text[:m.end()]
    return text
