"""Report formats come from one registry (``perfgate.render.formats``): each module of the
package is one format, and ``perfgate report --format`` finds a new one with no other
change. The JUnit format is checked on the two kept real runs."""

from __future__ import annotations

import importlib
import pkgutil
import xml.etree.ElementTree as ET

import pytest

import perfgate.render.formats as formats_package
from perfgate.cli import main
from perfgate.render.formats import FORMATS, Format, formats
from perfgate.results.run import load_run
from tests.unit.test_rerender_golden import FAILED, PASSED, perfgate


def test_each_module_of_the_package_is_one_format():
    modules = [m.name for m in pkgutil.iter_modules(formats_package.__path__)]
    found = formats()
    for name in modules:
        module = importlib.import_module(f"perfgate.render.formats.{name}")
        mine = [f for f in found.values() if (f.render or f.files).__module__ == module.__name__]
        assert len(mine) == 1, (name, mine)
    assert {"text", "csv", "markdown", "junit", "plots"} <= set(found)


def test_the_plots_are_a_format_of_files_perfgate_report_writes(monkeypatch, tmp_path):
    """``plots`` writes PNG files (the gated run's default format), not one text:
    ``perfgate report RUN --format plots --output DIR`` writes them there, a failed run's
    against its baseline's recorded run too, and prints each path."""
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(FAILED.parents[3])
    out = perfgate("report", FAILED, "--format", "plots", "--output", tmp_path)
    written = sorted(p.name for p in tmp_path.iterdir())
    stem = FAILED.name.removesuffix(".json.gz")
    assert f"{stem}.throughput.png" in written and f"{stem}.vs-baseline.png" in written, out
    assert all(str(tmp_path / name) in out for name in written)
    assert all((tmp_path / name).read_bytes().startswith(b"\x89PNG") for name in written)


def test_a_registered_format_is_offered_and_used_by_perfgate_report(monkeypatch, capsys):
    monkeypatch.chdir(FAILED.parents[3])
    keys = Format(
        "keys",
        "one judged figure a line",
        lambda run, _: "\n".join(c.key for c in run.checks) + "\n",
    )
    monkeypatch.setitem(FORMATS, "keys", keys)
    out = perfgate("report", FAILED, "--format", "keys")
    assert out.splitlines()[1] == "single.c1.agg_tok_s" and "(exit code 0)" in out
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    assert "keys: one judged figure a line" in " ".join(capsys.readouterr().out.split())


def test_junit_lists_every_judged_figure_with_its_verdict(monkeypatch, tmp_path):
    monkeypatch.chdir(FAILED.parents[3])
    for path in (PASSED, FAILED):
        run = load_run(path)
        out = tmp_path / f"{path.stem}.xml"
        perfgate("report", path, "--format", "junit", "--output", out)
        suite = ET.parse(out).getroot()
        cases = suite.findall("testcase")
        failed = [c for c in run.checks if c.failed]
        assert len(cases) == len(run.checks) == int(suite.get("tests"))
        assert int(suite.get("failures")) == len(failed) == len(suite.findall("testcase/failure"))
        for case, check in zip(cases, run.checks, strict=True):
            assert f"{case.get('classname').rsplit('.', 1)[1]}.{case.get('name')}" == check.key
            verdict = case.find("properties/property[@name='verdict']").get("value")
            assert verdict == check.verdict
    assert int(ET.parse(tmp_path / f"{FAILED.stem}.xml").getroot().get("failures")) == 12
    assert int(ET.parse(tmp_path / f"{PASSED.stem}.xml").getroot().get("failures")) == 0
