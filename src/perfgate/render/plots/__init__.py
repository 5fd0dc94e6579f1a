"""PNG plots of a run (matplotlib, the optional ``plots`` extra). Renders only.

:func:`render_run_plots` writes, for a run JSON:

- ``<stem>.throughput.png``: aggregate tok/s against concurrency (median of the runs,
  each run a dot), the baseline with its tolerance band, failed figures marked;
- ``<stem>.latency.png``: TTFT and TPOT against concurrency (median and p99, as gated);
- ``<stem>.distribution.png``: per-request end-to-end latency per level (box plots);
- ``<stem>.vs-baseline.png`` (given the baseline's recorded run): both runs' curves on
  the same axes.

Figures are recomputed from the run's raw records, as ``perfgate report`` does.

Modules: :mod:`.common`, :mod:`.points`, :mod:`.draw`, :mod:`.charts`.
"""
