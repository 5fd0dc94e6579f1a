"""Every engine's log parser against what a new engine version could do to its log:
reorder lines, add unknown lines, drop lines, change line endings or prefixes. A fact
read from a variant is the fact read from the original, or absent; never another value.

The fixtures are listed with their origin in tests/data/logs/README.md.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from perfgate.engines import VLLM, Engine, Fact, LlamaCpp, SGLang

LOGS = Path(__file__).parents[1] / "data" / "logs"

FIXTURES: list[tuple[Engine, str]] = [
    (LlamaCpp(), "llamacpp-spec-draft-simple.log"),
    (LlamaCpp(), "llamacpp-cpu-lv4.log"),
    (LlamaCpp(), "llamacpp-cpu-fa-off-q8k.log"),
    (LlamaCpp(), "llamacpp-cpu-ngl-no-gpu.log"),
    (LlamaCpp(), "llamacpp-cuda.log"),
    (LlamaCpp(), "llamacpp-cuda-regressed.log"),
    (VLLM(), "vllm-cpu-gemma3.log"),
    (VLLM(), "vllm-cpu-ngram.log"),
    (VLLM(), "vllm-cpu-eager.log"),
    (VLLM(), "vllm-gpu-dflash.log"),
    (VLLM(), "vllm-gpu-dflash-regressed.log"),
    (SGLang(), "sglang-mtp.log"),
    (SGLang(), "sglang-mtp-regressed.log"),
]
IDS = [name for _, name in FIXTURES]
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def values(facts: dict[str, Fact]) -> dict[str, object]:
    return {key: fact.value for key, fact in facts.items()}


def configured(facts: dict[str, Fact]) -> dict[str, object]:
    """Facts without the periodic ``log_*`` figures (several lines, the last one wins)."""
    return {k: v for k, v in values(facts).items() if not k.startswith("log_")}


def matches_any(engine: Engine, line: str) -> bool:
    return any(pattern.regex.search(line) for pattern in engine.log_patterns)


def test_every_fixture_is_listed_in_the_readme():
    readme = (LOGS / "README.md").read_text()
    for path in LOGS.iterdir():
        if path.name != "README.md":
            assert f"`{path.name}`" in readme, f"{path.name} has no origin in README.md"


@pytest.mark.parametrize(("engine", "name"), FIXTURES, ids=IDS)
def test_fixture_yields_facts(engine: Engine, name: str):
    assert engine.log_facts((LOGS / name).read_text())


@pytest.mark.parametrize(("engine", "name"), FIXTURES, ids=IDS)
@PROPERTY
@given(data=st.data())
def test_reordered_lines_give_the_same_facts(engine: Engine, name: str, data: st.DataObject):
    lines = (LOGS / name).read_text().splitlines()
    shuffled = data.draw(st.permutations(lines))
    expected = configured(engine.log_facts("\n".join(lines)))
    assert configured(engine.log_facts("\n".join(shuffled))) == expected


@pytest.mark.parametrize(("engine", "name"), FIXTURES, ids=IDS)
@PROPERTY
@given(data=st.data())
def test_missing_lines_leave_facts_unknown_never_wrong(
    engine: Engine, name: str, data: st.DataObject
):
    lines = (LOGS / name).read_text().splitlines()
    kept = data.draw(st.lists(st.booleans(), min_size=len(lines), max_size=len(lines)))
    subset = [line for line, keep in zip(lines, kept, strict=True) if keep]
    full = configured(engine.log_facts("\n".join(lines)))
    for key, value in configured(engine.log_facts("\n".join(subset))).items():
        assert full.get(key) == value, f"{key}: {value!r}, the whole log says {full.get(key)!r}"


_NOISE = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=120
)


@pytest.mark.parametrize(("engine", "name"), FIXTURES, ids=IDS)
@PROPERTY
@given(data=st.data())
def test_unknown_lines_change_nothing(engine: Engine, name: str, data: st.DataObject):
    lines = (LOGS / name).read_text().splitlines()
    noise = data.draw(st.lists(_NOISE, max_size=8))
    for line in noise:
        assume(not matches_any(engine, line))
    mixed = list(lines)
    for line in noise:
        mixed.insert(data.draw(st.integers(0, len(mixed))), line)
    expected = values(engine.log_facts("\n".join(lines)))
    assert values(engine.log_facts("\n".join(mixed))) == expected


@pytest.mark.parametrize(("engine", "name"), FIXTURES, ids=IDS)
@pytest.mark.parametrize(
    "transform",
    [
        pytest.param(lambda line: line + "\r", id="crlf"),
        pytest.param(lambda line: line + "   ", id="trailing-spaces"),
        pytest.param(lambda line: "2026-11-30T12:00:00.000000000Z " + line, id="docker-ts"),
        pytest.param(lambda line: "server[1234]: " + line, id="journald"),
    ],
)
def test_line_endings_and_prefixes_change_no_value(engine, name, transform):
    lines = (LOGS / name).read_text().splitlines()
    expected = values(engine.log_facts("\n".join(lines)))
    assert values(engine.log_facts("\n".join(transform(line) for line in lines))) == expected


@pytest.mark.parametrize(("engine", "name"), FIXTURES, ids=IDS)
def test_an_empty_or_foreign_log_gives_no_facts(engine: Engine, name: str):
    assert engine.log_facts("") == {}
    others = [n for e, n in FIXTURES if type(e) is not type(engine)]
    for other in others:
        facts = configured(engine.log_facts((LOGS / other).read_text()))
        # another engine's log may share a phrase (NCCL, custom all-reduce) but never
        # claims this engine's configuration
        assert not {"threads", "slots", "kv_cache_type_k", "spec_method"} & facts.keys(), (
            f"{name} parser read {facts} from {other}"
        )


def test_evidence_is_the_line_read():
    text = (LOGS / "llamacpp-cpu-lv4.log").read_text()
    facts = LlamaCpp().log_facts(text)
    for key, fact in facts.items():
        assert fact.source == "log"
        assert fact.evidence and fact.evidence in text, key
    assert re.search(r"Flash Attention enabled", facts["flash_attn_active"].evidence or "")
