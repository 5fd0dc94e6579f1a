"""What is wrong with an answer, given what its request asked: pure functions over the
answer (its text, its calls), used by the correctness checks and, request by request, by
a measured level (``schema_valid_rate``, ``tool_call_valid_rate``).

- Structured output: an answer asked for with ``response_format`` must parse as JSON and,
  with a JSON Schema, validate against it.
- Tool calls: each call names an offered function, and its arguments parse as a JSON
  object valid against that function's parameters; no call text is left in the content.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator


@lru_cache(maxsize=64)
def _validator(schema_json: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(schema_json))


def validator(schema: dict[str, Any]) -> Draft202012Validator:
    """A JSON Schema validator of ``schema``, built once per schema (a level judges each of
    its answers against the same one)."""
    return _validator(json.dumps(schema, sort_keys=True))


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
        for error in validator(schema).iter_errors(value)
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


Tool = dict[str, Any]  # {"type": "function", "function": {"name", "description", "parameters"}}
Call = dict[str, str]  # {"id", "name", "arguments"}: arguments as the JSON text sent

# call text a template or parser left in content: Hermes/Qwen tags, Mistral's marker,
# llama.cpp's generic JSON, a Python-style call of an offered function (matched below)
CALL_MARKERS = ("<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<|python_tag|>", '"tool_call"')


def tool(name: str, description: str, parameters: dict[str, Any]) -> Tool:
    """One offered function, as the OpenAI ``tools`` field carries it."""
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def call_problems(call: Call, tools: list[Tool]) -> list[str]:
    """Why one call is not a valid call of an offered function (empty when it is): its
    name is offered, its arguments parse as a JSON object valid against that function's
    parameters."""
    offered = {t["function"]["name"]: t["function"] for t in tools}
    name = call.get("name", "")
    if name not in offered:
        return [f"calls {name!r}, which was not offered (offered: {', '.join(sorted(offered))})"]
    try:
        arguments = json.loads(call.get("arguments") or "")
    except ValueError as exc:
        return [f"{name}: arguments are not JSON ({exc}): {call.get('arguments', '')[:120]!r}"]
    if not isinstance(arguments, dict):
        return [f"{name}: arguments are not a JSON object: {call.get('arguments', '')[:120]!r}"]
    schema = offered[name].get("parameters") or {"type": "object"}
    return [
        f"{name}: arguments fail the schema at "
        f"{'/'.join(map(str, error.absolute_path)) or 'the top'}: {error.message}"
        for error in validator(schema).iter_errors(arguments)
    ]


def leaked_call(content: str, tools: list[Tool]) -> str | None:
    """The call text left in ``content`` (a parser off or wrong), or None."""
    for marker in CALL_MARKERS:
        if marker in content:
            return marker
    for t in tools:
        name = re.escape(t["function"]["name"])
        if found := re.search(rf'"name"\s*:\s*"{name}"|\b{name}\s*\(', content):
            return found[0]
    return None


def same_calls(a: list[Call] | None, b: list[Call] | None) -> bool:
    """The same functions with the same arguments (as JSON values), in order; ids aside."""

    def key(calls: list[Call] | None) -> list[tuple[str, Any]]:
        out = []
        for call in calls or ():
            try:
                arguments = json.loads(call.get("arguments") or "")
            except ValueError:
                arguments = call.get("arguments")
            out.append((call.get("name", ""), arguments))
        return out

    return key(a) == key(b)


# -- one measured request: did its answer meet what it asked? ---------------------------


def asked_schema(fields: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON Schema a request's ``response_format`` asks its answer to meet (JSON-object
    mode: any object); None when the request asks for no structured answer."""
    wanted = fields.get("response_format")
    if not isinstance(wanted, dict):
        return None
    if wanted.get("type") == "json_schema":
        return dict((wanted.get("json_schema") or {}).get("schema") or {"type": "object"})
    if wanted.get("type") == "json_object":
        return {"type": "object"}
    return None


def offered_tools(fields: dict[str, Any]) -> list[Tool] | None:
    """The functions a request offers (its ``tools``); None when it offers none."""
    tools = fields.get("tools")
    return list(tools) if isinstance(tools, list) and tools else None


def meets_schema(text: str, schema: dict[str, Any]) -> bool:
    """Whether an answer's text is JSON valid against ``schema`` (``schema_valid_rate``)."""
    return not schema_problems(text, schema)


def valid_tool_answer(text: str, calls: list[Call] | None, tools: list[Tool]) -> bool:
    """Whether an answer to a request that needs a call is one (``tool_call_valid_rate``):
    at least one call came back parsed, every call is valid against the offered
    functions, and no call text is left in the content."""
    if not calls:
        return False
    return not any(call_problems(c, tools) for c in calls) and leaked_call(text, tools) is None
