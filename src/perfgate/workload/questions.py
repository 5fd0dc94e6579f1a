"""Seeded short questions about cities, for the prompt kinds whose requests ask for an
answer of a given shape (``structured``: JSON; ``tool-calls``: a function call)."""

from __future__ import annotations

import random

from perfgate.profile import WorkloadSpec
from perfgate.workload.kinds import Draw, PromptKind
from perfgate.workload.prompts import Prompt

CITIES = (
    "Paris", "Rome", "Berlin", "Madrid", "Lisbon", "Vienna", "Prague", "Warsaw", "Athens",
    "Dublin", "Oslo", "Stockholm", "Helsinki", "Copenhagen", "Amsterdam", "Brussels",
    "Zurich", "Budapest", "Tokyo", "Seoul", "Beijing", "Delhi", "Cairo", "Nairobi", "Lagos",
    "Lima", "Bogota", "Santiago", "Toronto", "Chicago", "Boston", "Sydney",
)  # fmt: skip


def city_questions(template: str, count: int, seed: int) -> list[str]:
    """``count`` questions, ``template`` filled with a city each (``{city}``), drawn with
    ``seed``: the same for the same seed, on both sides of an A/B run."""
    rng = random.Random(seed)
    return [template.format(city=rng.choice(CITIES)) for _ in range(count)]


class CityQuestions(PromptKind):
    """A kind whose prompts are ``question`` about a seeded city each, and whose answers
    (``answers``, in words) end on their own: no field forces their length."""

    question = "{city}"
    answers = "answers"
    ends_on_its_own = True

    def one_length(self, workload: WorkloadSpec) -> bool:
        return False  # each answer ends when its shape closes

    def lengths(self, workload: WorkloadSpec) -> str:
        return f"{self.answers} of at most {workload.output_len} tokens"

    def draw(self, draw: Draw) -> list[Prompt]:
        return [Prompt(q, None) for q in city_questions(self.question, draw.count, draw.seed)]
