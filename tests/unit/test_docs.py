"""The docs: the generated references are current, every relative link in the README and
the site resolves, the README stays short, the site builds strictly, and the published
profile JSON Schema accepts every shipped profile and refuses an unknown field."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import jsonschema
import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_generated_references_are_current():
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_reference.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_the_figures_page_comes_from_the_registry():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import gen_reference
    finally:
        sys.path.pop(0)
    from perfgate.gate import figures

    page = gen_reference.figures_page()
    for figure in (*figures.FIGURES, figures.SCALING, *figures.CHOSEN, *figures.SEARCH_FIGURES):
        assert f"| `{figure.name}` | {figure.title} |" in page


@pytest.mark.parametrize(
    "page", [REPO / "README.md", *sorted(DOCS.rglob("*.md"))], ids=lambda p: p.name
)
def test_every_relative_link_resolves(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # not in code blocks
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        assert (page.parent / target).exists(), f"{page.name}: {target}"


def test_the_readme_is_short_and_shows_three_starts():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    for start in ("**1. The demo**", "**2. Your own server**", "**3. Your CI**"):
        assert start in text


def test_the_site_builds_strictly(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "reference" / "figures" / "index.html").is_file()


def test_the_profile_schema_accepts_every_shipped_profile_and_refuses_a_typo():
    schema = json.loads((DOCS / "reference" / "profile.schema.json").read_text())
    for path in sorted((REPO / "profiles").glob("*.toml")):
        jsonschema.validate(tomllib.loads(path.read_text()), schema)
    profile = tomllib.loads((REPO / "profiles" / "llamacpp-gemma3-270m.toml").read_text())
    profile["workload"]["input_length"] = 128
    with pytest.raises(jsonschema.ValidationError, match="input_length"):
        jsonschema.validate(profile, schema)
