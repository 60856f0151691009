"""Event text as data: characters that would act on a terminal or a page are shown escaped."""
from __future__ import annotations

import html
import unicodedata

# Bidirectional overrides and isolates reorder the text around them ("Trojan Source").
_BIDI = {"\u061c", "\u200e", "\u200f", *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))}
_ACTIVE_CATEGORIES = {"Cc", "Cs", "Zl", "Zp"}   # controls, lone surrogates, line/paragraph separators


def printable(text: str, keep_newlines: bool = False) -> str:
    """``text`` with control, bidi and separator characters written as ``\\xNN`` / ``\\uNNNN``."""
    return "".join(_escape(c) if _active(c, keep_newlines) else c for c in text)


def escaped(text: str) -> str:
    """``printable`` text, HTML-escaped (quotes too): for pages and SVG."""
    return html.escape(printable(text), quote=True)


def _active(c: str, keep_newlines: bool) -> bool:
    if keep_newlines and c == "\n":
        return False
    return c in _BIDI or unicodedata.category(c) in _ACTIVE_CATEGORIES or _noncharacter(ord(c))


def _noncharacter(code: int) -> bool:
    """U+FDD0..U+FDEF and the last two code points of every plane: never text, and an XML parser
    refuses U+FFFE/U+FFFF, so one in an event would break the SVG figure."""
    return 0xFDD0 <= code <= 0xFDEF or code & 0xFFFE == 0xFFFE


def _escape(c: str) -> str:
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
