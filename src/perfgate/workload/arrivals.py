"""When an open-loop level sends each request: seeded arrival schedules.

- ``constant``: one request every ``1 / rate`` seconds;
- ``poisson``: exponential gaps of mean ``1 / rate`` (independent arrivals);
- ``gamma``: gamma gaps of shape ``burstiness`` and mean ``1 / rate``: below 1 burstier
  than Poisson, above 1 more even (vLLM's ``--burstiness``; 1 is Poisson). The gaps'
  coefficient of variation is ``1 / sqrt(burstiness)``.

The first request is due at offset 0; the schedule does not wait for answers (no
coordinated omission: a slow server does not slow the arrivals down).
"""

from __future__ import annotations

import random
from typing import Literal

Arrival = Literal["constant", "poisson", "gamma"]


def arrival_offsets(
    count: int, rate: float, arrival: Arrival = "poisson", burstiness: float = 1.0, seed: int = 0
) -> list[float]:
    """Seconds after the level's start at which each of ``count`` requests is due."""
    if rate <= 0:
        raise ValueError(f"request rate must be > 0, not {rate}")
    if burstiness <= 0:
        raise ValueError(f"burstiness must be > 0, not {burstiness}")
    rng = random.Random(f"{seed}:arrivals")
    mean = 1.0 / rate
    offsets = [0.0]
    for _ in range(count - 1):
        if arrival == "constant":
            gap = mean
        elif arrival == "poisson":
            gap = rng.expovariate(rate)
        else:
            gap = rng.gammavariate(burstiness, mean / burstiness)
        offsets.append(offsets[-1] + gap)
    return offsets[:count]
