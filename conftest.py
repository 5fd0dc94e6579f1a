"""Root conftest of perfgate's repository. The suites' fixtures ship in the wheel as
perfgate.fixtures (from fixtures/), and the plugin registers them wherever perfgate is
configured; naming them here too lets a reader of the repository find them."""

pytest_plugins = [
    "perfgate.fixtures.backend",
    "perfgate.fixtures.client",
    "perfgate.fixtures.recorder",
    "perfgate.fixtures.gate",
]
