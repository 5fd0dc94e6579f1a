"""Command lines that start an engine: a profile's ``flag = value`` table as arguments, and
the server argv every launchable engine builds from it."""

from __future__ import annotations

import json

from perfgate.profile import ArgValue, Profile


def flags_from_args(args: dict[str, ArgValue], model_path: str | None = None) -> list[str]:
    """Turn a profile's ``flag = value`` table into command-line arguments.

    ``true`` gives a bare flag, ``false`` omits it, a list repeats it, a table is passed
    as one JSON argument (e.g. a speculative config). Keys keep their order. In string
    values ``{model_path}`` becomes the resolved model path (e.g. a draft model that is
    the model itself).
    """
    out: list[str] = []
    if model_path is not None:
        args = {
            k: v.replace("{model_path}", model_path) if isinstance(v, str) else v
            for k, v in args.items()
        }
    for key, value in args.items():
        flag = key if key.startswith("-") else f"--{key}"
        if value is True:
            out.append(flag)
        elif value is False:
            continue
        elif isinstance(value, list):
            for item in value:
                out += [flag, str(item)]
        elif isinstance(value, dict):
            out += [flag, json.dumps(value, separators=(",", ":"))]
        else:
            out += [flag, str(value)]
    return out


def server_argv(
    program: list[str],
    model_args: list[str],
    name_flag: str,
    profile: Profile,
    host: str,
    port: int,
    model: str,
) -> list[str]:
    """``program``, the model, its served name, host and port, then the profile's flags."""
    return [
        *program,
        *model_args,
        name_flag,
        profile.model.name,
        "--host",
        host,
        "--port",
        str(port),
        *flags_from_args(profile.server.args, model),
        *profile.server.extra_args,
    ]
