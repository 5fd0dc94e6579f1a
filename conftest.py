"""Root conftest: loads perfgate's fixture modules, nothing else."""

pytest_plugins = ["fixtures.backend", "fixtures.client", "fixtures.recorder", "fixtures.gate"]
