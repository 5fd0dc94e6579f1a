"""One registry for every kind of plug-in (``perfgate.registry``): name -> item in
registration order, a name taken twice refused, a name not held an error that lists the
known ones, and the modules of a package imported once to find the plug-ins."""

from __future__ import annotations

import sys
import textwrap

import pytest

from perfgate.engines import ENGINES, Engine, engine_names
from perfgate.gate.figures import BY_NAME, FIGURES
from perfgate.registry import Registry, UnknownName
from perfgate.render.formats import FORMATS, formats
from perfgate.workload.kinds import KINDS, prompt_kind


def test_items_are_kept_by_name_in_registration_order():
    reg: Registry[int] = Registry("number")
    assert reg.register("two", 2) == 2  # returns the item: usable as a decorator's body
    reg.register("one", 1)
    reg["three"] = 3  # the same as register
    assert list(reg) == ["two", "one", "three"]
    assert list(reg.items()) == [("two", 2), ("one", 1), ("three", 3)]
    assert reg["one"] == 1 and len(reg) == 3 and "two" in reg and "four" not in reg
    assert reg.get("four") is None and reg.get("four", 4) == 4  # a dict's get
    assert dict(reg) == {"two": 2, "one": 1, "three": 3}


def test_a_name_taken_twice_is_refused_and_the_first_item_kept():
    reg: Registry[str] = Registry("report format")
    reg.register("csv", "first")
    with pytest.raises(ValueError, match=r"^report format 'csv' is already registered$"):
        reg.register("csv", "second")
    with pytest.raises(ValueError, match="already registered"):
        reg["csv"] = "first"  # even the same item
    assert reg["csv"] == "first" and len(reg) == 1


def test_an_unknown_name_is_an_error_listing_the_known_names():
    reg: Registry[int] = Registry("engine")
    for name in ("vllm", "llamacpp", "sglang"):
        reg.register(name, 0)
    with pytest.raises(UnknownName) as caught:
        reg["tgi"]
    assert str(caught.value) == "no engine 'tgi' (known: llamacpp, sglang, vllm)"
    assert caught.value.name == "tgi" and caught.value.known == ["llamacpp", "sglang", "vllm"]
    assert isinstance(caught.value, KeyError)  # so `get` and `in` behave as on a dict
    assert str(UnknownName("figure", "x", [])) == "no figure 'x' (known: none registered)"


def test_unregister_removes_and_returns_the_item():
    reg: Registry[int] = Registry("figure")
    reg.register("a", 1)
    reg.register("b", 2)
    assert reg.unregister("a") == 1
    assert list(reg) == ["b"]
    del reg["b"]
    assert not reg
    with pytest.raises(UnknownName, match="no figure 'a'"):
        reg.unregister("a")
    reg.register("a", 3)  # free again
    assert reg["a"] == 3


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """A package ``plugs`` of two modules, each registering itself on import."""
    package = tmp_path / "plugs"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from perfgate.registry import Registry\nPLUGS = Registry('plug', package=__name__)\n"
    )
    for name in ("beta", "alpha"):
        (package / f"{name}.py").write_text(
            textwrap.dedent(
                f"""
                from plugs import PLUGS
                PLUGS.register({name!r}, {name!r}.upper())
                """
            )
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield package
    for module in [m for m in sys.modules if m == "plugs" or m.startswith("plugs.")]:
        del sys.modules[module]


def test_discover_imports_each_module_of_the_package_once(plugins):
    import plugs

    assert not plugs.PLUGS  # nothing registered until discovered
    found = plugs.PLUGS.discover()
    assert [m.__name__ for m in found] == ["plugs.alpha", "plugs.beta"]  # in name order
    assert list(plugs.PLUGS.items()) == [("alpha", "ALPHA"), ("beta", "BETA")]
    assert plugs.PLUGS.discover() == []  # once: no module imported (or registered) again
    assert list(plugs.PLUGS) == ["alpha", "beta"]
    assert Registry("plug").discover() == []  # no package: nothing to discover


def test_a_module_that_fails_to_import_is_tried_again(plugins):
    (plugins / "broken.py").write_text("raise RuntimeError('not yet')\n")
    import plugs

    with pytest.raises(RuntimeError, match="not yet"):
        plugs.PLUGS.discover()
    (plugins / "broken.py").write_text("")
    assert [m.__name__ for m in plugs.PLUGS.discover()] == [
        "plugs.alpha",
        "plugs.beta",
        "plugs.broken",
    ]
    assert list(plugs.PLUGS) == ["alpha", "beta"]  # each registered once


def test_the_five_kinds_of_plug_in_are_registries():
    from perfgate.measure.samplers import SAMPLERS

    assert isinstance(ENGINES, Registry) and all(isinstance(e, Engine) for e in ENGINES.values())
    assert engine_names() == sorted(engine_names()) == list(ENGINES)
    formats()
    assert isinstance(FORMATS, Registry) and {"text", "csv", "markdown", "junit"} <= set(FORMATS)
    prompt_kind("random")
    assert isinstance(KINDS, Registry) and {"random", "shared-prefix", "dataset"} <= set(KINDS)
    assert isinstance(SAMPLERS, Registry) and SAMPLERS.package == "perfgate.measure.plugins"
    assert isinstance(BY_NAME, Registry) and list(BY_NAME)[: len(FIGURES)] == [
        f.name for f in FIGURES
    ]
