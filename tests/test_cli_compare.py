"""`perfgate compare` on recorded runs: the fact diff, and runs that carry no facts."""

from __future__ import annotations

import json

from perfgate.cli import main
from tests.helpers import ROOT

RUN = ROOT / "baselines" / "llamacpp-gemma3-270m" / "cpu-2x-amd-epyc-avx512.run.json"


def test_same_run_has_no_fact_difference(capsys):
    assert main(["compare", str(RUN), str(RUN)]) == 0
    out = capsys.readouterr().out
    assert "configuration facts: no difference" in out and "no regression" in out


def test_changed_configuration_is_listed(tmp_path, capsys):
    run = json.loads(RUN.read_text())
    run["facts"]["threads"]["value"] = 1
    changed = tmp_path / "new.json"
    changed.write_text(json.dumps(run))
    main(["compare", str(RUN), str(changed)])
    out = capsys.readouterr().out
    assert "configuration facts that differ (OLD → NEW):\n  threads: 2 → 1" in out


def test_runs_without_facts_say_so(tmp_path, capsys):
    run = json.loads(RUN.read_text())
    run["facts"] = {}
    old = tmp_path / "old.json"
    old.write_text(json.dumps(run))
    assert main(["compare", str(old), str(RUN)]) == 0
    assert "no configuration facts in OLD" in capsys.readouterr().out
