"""Tool calls: what is wrong with an answer to a request that offered functions. Pure
functions over the answer (its calls, its content) and the tools offered."""

from __future__ import annotations

import json
import re
from typing import Any

from jsonschema import Draft202012Validator

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
        for error in Draft202012Validator(schema).iter_errors(arguments)
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
