"""The structured-output check's rules on answers of each kind (texts written here: they
show the rules read them, not what any engine returns; the live checks are in
tests/e2e/test_model_kinds_e2e.py and tests/engines/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate.client.answers import object_problems, response_format, schema_problems

DATA = json.loads(
    (Path(__file__).parents[2] / "suites" / "correctness" / "data" / "structured.json").read_text()
)
CAPITAL = DATA["schema_cases"][0]["schema"]


def test_a_valid_answer_has_no_problem():
    assert schema_problems('{"city": "Paris", "country": "France"}', CAPITAL) == []


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("The capital of France is Paris.", "not JSON"),  # response_format ignored
        ('{"city": "Paris"}', "'country' is a required property"),
        ('{"city": "Paris", "country": 7}', "at country: 7 is not of type 'string'"),
        ('{"city": "Paris", "country": "France", "population": 2}', "Additional properties"),
        ('{"city": "Paris", "coun', "not JSON"),  # cut at max_tokens
    ],
)
def test_each_way_an_answer_misses_its_schema_is_named(text, named):
    problems = schema_problems(text, CAPITAL)
    assert problems and named in "; ".join(problems), problems


def test_every_shipped_case_is_a_valid_schema_with_bounded_strings():
    """A string without maxLength lets a guided model write until max_tokens."""
    from jsonschema import Draft202012Validator

    for case in DATA["schema_cases"]:
        Draft202012Validator.check_schema(case["schema"])
        text = json.dumps(case["schema"])
        assert text.count('"type": "string"') == text.count('"maxLength"'), case["name"]


def test_json_object_mode_wants_an_object():
    assert object_problems('{"name": "Tom", "color": "grey"}') == []
    assert object_problems('["a cat"]') == ["JSON, but not an object: '[\"a cat\"]'"]
    assert object_problems("A cat is a small animal.")[0].startswith("not JSON")


def test_the_request_asks_for_the_schema_strictly():
    fmt = response_format("capital", CAPITAL)
    assert fmt == {
        "type": "json_schema",
        "json_schema": {"name": "capital", "schema": CAPITAL, "strict": True},
    }
