"""How many cores this host gives right now, measured rather than read from ``os.cpu_count``.

A shared host's other tenants can hold a core for minutes. A test whose claim needs two
free cores measures them just before and after, and counts only what ran while they were
free.
"""

import time
from concurrent.futures import ProcessPoolExecutor


def _spin(start_at: float, seconds: float) -> float:
    """Busy-loop from ``start_at`` (CLOCK_MONOTONIC, shared by all processes) for ``seconds``;
    the share of a core this process got."""
    time.sleep(max(0.0, start_at - time.monotonic()))
    cpu_before, end = time.process_time(), start_at + seconds
    while time.monotonic() < end:
        pass
    return (time.process_time() - cpu_before) / seconds


def free_cores(processes: int = 2, seconds: float = 0.5) -> float:
    """Cores' worth of CPU that ``processes`` busy processes got together over ``seconds``."""
    with ProcessPoolExecutor(processes) as pool:
        start_at = time.monotonic() + 0.3  # after every process has started
        shares = pool.map(_spin, [start_at] * processes, [seconds] * processes)
        return sum(shares)
