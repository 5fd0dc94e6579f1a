"""Prompt kinds come from one registry (``perfgate.workload.kinds``): each module of the
package is one kind, and the kinds are exactly the names a profile may give
``workload.prompts``."""

from __future__ import annotations

import importlib
import pkgutil
import typing

import pytest

import perfgate.workload.kinds as kinds_package
from perfgate.errors import ProfileError
from perfgate.profile import WorkloadSpec
from perfgate.workload.kinds import KINDS, prompt_kind


def test_each_module_is_a_kind_and_the_kinds_are_the_profiles_names():
    prompt_kind("random")  # finds every module
    for module in pkgutil.iter_modules(kinds_package.__path__):
        loaded = importlib.import_module(f"perfgate.workload.kinds.{module.name}")
        mine = {type(k) for k in KINDS.values() if type(k).__module__ == loaded.__name__}
        assert len(mine) == 1, module.name
    names = typing.get_args(WorkloadSpec.model_fields["prompts"].annotation)
    assert set(KINDS) == set(names)


def test_a_name_no_kind_has_is_a_clear_error():
    with pytest.raises(ProfileError, match=r"no prompt kind 'poems' \(there are: dataset, "):
        prompt_kind("poems")
