"""Seeded short questions about cities, for the prompt kinds whose requests ask for an
answer of a given shape (``structured``: JSON; ``tool-calls``: a function call)."""

from __future__ import annotations

import random

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
