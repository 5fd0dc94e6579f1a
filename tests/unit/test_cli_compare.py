"""`perfgate compare` on recorded runs: the fact diff, and runs that carry no facts."""

from __future__ import annotations

import gzip
import json

from perfgate.cli import main
from tests.helpers import ROOT

RUN = ROOT / "baselines" / "llamacpp-gemma3-270m" / "cpu-2x-amd-epyc-avx512.run.json.gz"


def read_run():
    """The default profile's kept baseline run (a real run, schema 2: token gaps in us)."""
    return json.loads(gzip.decompress(RUN.read_bytes()))


def slowed(run, factor, measurement="sweep"):
    """The run with every request of one measurement taking ``factor`` times as long."""
    for level in run["measurements"][measurement]["levels"]:
        for key in ("start", "end"):
            level[key] *= factor
        for record in level["records"]:
            for key in ("start", "end", "sent", "scheduled"):
                if record.get(key) is not None:
                    record[key] *= factor
            if "token_gaps_us" in record:  # the first from start, then between chunks
                record["token_gaps_us"] = [round(g * factor) for g in record["token_gaps_us"]]
            else:  # schema 1
                record["token_times"] = [t * factor for t in record["token_times"]]
    return run


def test_a_run_against_its_own_repeats_passes_a_halved_one_regresses(tmp_path, capsys):
    run = read_run()
    # NEW: the same real run with its repeats in the other order: the same figures
    for m in run["measurements"].values():
        m["levels"].reverse()
    same = tmp_path / "same.json"
    same.write_text(json.dumps(run))
    assert main(["compare", str(RUN), str(same)]) == 0
    out = capsys.readouterr().out
    assert "configuration facts: no difference" in out and "no regression" in out
    half = tmp_path / "half.json"
    half.write_text(json.dumps(slowed(read_run(), 2.0)))
    assert main(["compare", str(RUN), str(half)]) == 1
    out = capsys.readouterr().out
    verdict = {line.split()[0]: line.split("|")[5].split()[0] for line in out.splitlines()
               if line.startswith(("sweep.", "single."))}  # fmt: skip
    assert verdict["sweep.c4.agg_tok_s"] == verdict["sweep.c1.per_request_tok_s"] == "REGRESSED"
    assert verdict["single.c1.per_request_tok_s"] == "PASS"  # only the sweep was slowed


def test_a_level_missing_from_new_fails_as_missing(tmp_path, capsys):
    run = read_run()
    sweep = run["measurements"]["sweep"]
    sweep["levels"] = [lv for lv in sweep["levels"] if lv["concurrency"] != 4]
    sweep["not_run"] = [4]
    new = tmp_path / "new.json"
    new.write_text(json.dumps(run))
    assert main(["compare", str(RUN), str(new)]) == 1
    out = capsys.readouterr().out
    assert "sweep.c4.agg_tok_s" in out and "MISSING (level C=4 did not run)" in out


def test_changed_configuration_is_listed(tmp_path, capsys):
    run = read_run()
    run["facts"]["threads"]["value"] = 2
    changed = tmp_path / "new.json"
    changed.write_text(json.dumps(run))
    main(["compare", str(RUN), str(changed)])
    out = capsys.readouterr().out
    assert "configuration facts that differ (OLD → NEW):\n  threads: 1 → 2" in out


def test_runs_without_facts_say_so(tmp_path, capsys):
    run = read_run()
    run["facts"] = {}
    old = tmp_path / "old.json"
    old.write_text(json.dumps(run))
    main(["compare", str(old), str(RUN)])
    assert "no configuration facts in OLD" in capsys.readouterr().out
