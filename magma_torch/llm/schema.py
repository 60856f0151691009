"""Structured-output helpers shared by every backend: a schema is either a JSON-schema dict or
a pydantic ``BaseModel`` class; the decoded output is validated against it.

``parsed`` is the decoded JSON (a dict / list) for a dict schema and a model instance for a
pydantic class."""
from __future__ import annotations

import json
import re
from typing import Any

from magma_torch.errors import MagmaError

from .base import Prompt


class OutputError(MagmaError, ValueError):
    """The model's text is not valid JSON, or the JSON violates the schema (retryable)."""


def _is_pydantic(schema: Any) -> bool:
    return isinstance(schema, type) and hasattr(schema, "model_json_schema") and hasattr(schema, "model_validate")


def schema_name(schema: dict | type) -> str:
    if _is_pydantic(schema):
        name = schema.__name__
    else:
        name = str(schema.get("title") or "output")
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "output"


def to_json_schema(schema: dict | type) -> dict:
    """The JSON schema of a dict schema (as is) or of a pydantic model class."""
    if _is_pydantic(schema):
        return schema.model_json_schema()
    if isinstance(schema, dict):
        return schema
    raise TypeError(f"schema must be a JSON-schema dict or a pydantic BaseModel class, got {schema!r}")


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


def extract_json(text: str, lenient: bool = False) -> Any:
    """Decode ``text`` as JSON. With ``lenient`` (prompted, unconstrained models) strip a code
    fence and fall back to the first balanced {...} / [...] block in the text."""
    try:
        return _decoded(text.strip(), lenient)
    except RecursionError:   # json recurses once per nesting level: "[[[[..." past the interpreter's limit
        raise OutputError("malformed JSON: nested too deeply") from None


def _decoded(s: str, lenient: bool) -> Any:
    try:
        return json.loads(s)
    except json.JSONDecodeError as e:
        if not lenient:
            raise OutputError(f"malformed JSON: {e.msg} at char {e.pos}") from None
        first_err = e
    m = _FENCE.match(s)
    if m:
        try:
            return json.loads(m.group(1))
        except json.JSONDecodeError:
            pass
    dec = json.JSONDecoder()
    for i, ch in enumerate(s):
        if ch in "{[":
            try:
                obj, _ = dec.raw_decode(s, i)
                return obj
            except json.JSONDecodeError:
                continue
    raise OutputError(f"malformed JSON: {first_err.msg} at char {first_err.pos}")


def validate(obj: Any, schema: dict | type) -> Any:
    """Validate a decoded JSON value; return the parsed object or raise OutputError."""
    if _is_pydantic(schema):
        try:
            return schema.model_validate(obj)
        except Exception as e:   # pydantic.ValidationError
            first = str(e).splitlines()
            raise OutputError("schema violation: " + " ".join(first[:3])[:300]) from None
    import jsonschema

    try:
        jsonschema.validate(obj, to_json_schema(schema))
    except jsonschema.ValidationError as e:
        path = "/".join(str(p) for p in e.absolute_path) or "<root>"
        raise OutputError(f"schema violation at {path}: {e.message}"[:300]) from None
    return obj


def parse_output(text: str, schema: dict | type, lenient: bool = False) -> Any:
    return validate(extract_json(text, lenient=lenient), schema)


def to_messages(prompt: Prompt) -> list[dict]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [dict(m) for m in prompt]


def json_instruction(schema: dict | type) -> str:
    return ("Reply with only one JSON object, no prose and no code fence, valid against this JSON schema:\n"
            + json.dumps(to_json_schema(schema), separators=(",", ":")))


def with_json_instruction(messages: list[dict], schema: dict | type) -> list[dict]:
    """Prepend (or extend) the system message with a JSON-only instruction for unconstrained models."""
    instr = json_instruction(schema)
    msgs = [dict(m) for m in messages]
    if msgs and msgs[0].get("role") == "system":
        msgs[0]["content"] = f"{msgs[0].get('content', '')}\n\n{instr}"
    else:
        msgs.insert(0, {"role": "system", "content": instr})
    return msgs
