"""Secrets kept out of logs, reports and run JSON: secret-looking names, and their values
redacted from command lines, text and profile dumps."""

from __future__ import annotations

import re

SECRET_NAME = re.compile(
    r"key|secret|passw|credential|auth|(?<!num_)token$|hf_token|bearer", re.IGNORECASE
)


REDACTED = "***"


ENV_PREFIX = "env:"  # a server.headers value read from the environment


def is_secret_name(name: str) -> bool:
    """Whether a flag, argument or variable name looks like it holds a secret (API keys,
    HF tokens): such values never go into logs, facts, reports or run JSON."""
    return bool(SECRET_NAME.search(name.lstrip("-").replace("-", "_")))


def redact_argv(argv: list[str]) -> list[str]:
    """A command line with the value of every secret-looking flag replaced by ***."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if arg.startswith("-") and is_secret_name(flag):
            if eq:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out


_SECRET_IN_TEXT = re.compile(
    r"((?:api[_-]?key|hf[_-]?token|access[_-]?token|secret|password|authorization)"
    r"['\"]?\s*[:=]\s*\[?\s*['\"]?(?:bearer\s+)?)([^\s'\",}\]]+)",
    re.IGNORECASE,
)


# a secret flag's value on a logged command line: --api-key KEY, --hf-token=TOKEN
_SECRET_FLAG_IN_TEXT = re.compile(
    r"(--(?:api[_-]?key|hf[_-]?token|access[_-]?token|secret|password)(?:\s+|=)['\"]?)"
    r"([^\s'\"]+)",
    re.IGNORECASE,
)


def redact_text(text: str) -> str:
    """Log text with ``api_key=...``, ``'api_key': ['...']``, ``--api-key ...``,
    ``Authorization: Bearer ...`` values replaced by ***, for failure messages and
    reports."""
    text = _SECRET_FLAG_IN_TEXT.sub(lambda m: m[1] + REDACTED, text)
    return _SECRET_IN_TEXT.sub(lambda m: m[1] + REDACTED, text)


def redact_tree(value: object, name: str = "") -> object:
    if name and is_secret_name(name) and isinstance(value, str | int | float):
        return REDACTED
    if isinstance(value, dict):
        return {k: redact_tree(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        items = [redact_tree(v) for v in value]
        argv = [v for v in items if isinstance(v, str)]
        return redact_argv(argv) if len(argv) == len(items) else items
    return value
