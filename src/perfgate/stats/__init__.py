"""Run-to-run noise, intervals and the verdict of one figure.

The model (docs/verdicts.md):

- The sampling unit is one run of a level. A figure gives one value per run.
- Noise is multiplicative: ``ln(value) = ln(true) + e``, so the spread of ln(value) is
  close to the coefficient of variation between runs.
- The estimate of a figure from ``n`` runs is the median of the runs (one disturbed run
  cannot move it). Its interval, as printed, is Welch's: the runs' own spread (not pooled
  with the recording's) and the baseline's own error, with Satterthwaite's degrees of
  freedom.
- The verdict passes only on evidence and is monotone: each bound it reads rises or
  stays when any run improves, so worsening a run never improves a verdict.
  - PASS: Wilcoxon's signed-rank lower bound of the runs' median (a Walsh average) clears
    the limit at 95% whatever the width of the noise, from 5 runs; with fewer runs,
    every run clears it. Each by the baseline's own error; and the median clears it by
    the noise recorded with the baseline.
  - REGRESSED: the same bound mirrored lies past the limit, or every run is past it and
    the median's whole 95% interval (the recorded noise) too.
  - Otherwise the level is measured again, up to the most runs; then it is TOO NOISY,
    a failure of its own. Runs noisier than recorded are never passed on fewer than 5
    runs: the gate measures on until their own bound decides.
  - On another host than the recording's the limit lies further by the spread between
    hosts (at 95%).
- Derived tolerances are sized so that a healthy figure, its runs as noisy as recorded,
  passes with the family-wise rate to spare; each figure's detectable drop is the
  smallest the gate fails 95% of the time.

Modules: :mod:`.distributions`, :mod:`.estimate`, :mod:`.decide`, :mod:`.power`.
"""
