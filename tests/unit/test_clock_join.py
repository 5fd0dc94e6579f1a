"""Joining a remote clock onto ours (client shards on other hosts)."""

from __future__ import annotations

import pytest

from perfgate.load.rayshards import clock_offset


def test_a_remote_clock_is_joined_from_its_fastest_reading():
    """Readings of a clock 1000 s ahead of ours with uneven transit (hand-made): the
    fastest round trip gives the offset, within half of it."""
    skew = 1000.0
    readings = [
        (0.0, skew + 0.004, 0.010),  # 10 ms round trip, 4 ms out, 6 ms back
        (1.0, skew + 1.0007, 1.001),  # 1 ms round trip, 0.7 ms out
        (2.0, skew + 2.0001, 2.005),
    ]
    offset, error = clock_offset(readings)
    assert error == pytest.approx(0.0005)
    assert abs(offset - skew) <= error
