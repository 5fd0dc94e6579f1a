"""Structured output: an answer asked for with ``response_format`` must parse as JSON and,
with a JSON Schema, validate against it. Pure functions over the answer's text."""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator


def parsed(text: str) -> tuple[Any, str | None]:
    """The JSON value of ``text``, or None and why it is not JSON."""
    try:
        return json.loads(text), None
    except ValueError as exc:
        return None, f"not JSON ({exc}): {text[:120]!r}"


def schema_problems(text: str, schema: dict[str, Any]) -> list[str]:
    """Why ``text`` is not a JSON value valid against ``schema`` (empty when it is)."""
    value, why = parsed(text)
    if why:
        return [why]
    return [
        f"fails its schema at {'/'.join(map(str, error.absolute_path)) or 'the top'}: "
        f"{error.message}"
        for error in Draft202012Validator(schema).iter_errors(value)
    ]


def object_problems(text: str) -> list[str]:
    """Why ``text`` is not a JSON object (JSON-object mode; empty when it is)."""
    value, why = parsed(text)
    if why:
        return [why]
    return [] if isinstance(value, dict) else [f"JSON, but not an object: {text[:120]!r}"]


def response_format(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI ``response_format`` asking for ``schema`` (strict)."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
