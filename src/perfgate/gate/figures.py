"""The gated figures, each defined once.

A figure gives one value per run of a level (the sampling unit of every verdict):

- ``agg_tok_s``: the run's aggregate tok/s (output tokens / wall time);
- ``per_request_tok_s``: the median over the run's requests of their tok/s;
- ``ttft_s``: the median over the run's requests of their TTFT;
- ``accept_rate``: speculative acceptance over the run's measured window;

Figures a profile may choose to gate as well (``gate.figures``; :data:`CHOSEN`), each
the run's value over its successful requests:

- ``ttft_p90_s``, ``ttft_p99_s``: 90th and 99th percentile of TTFT (``ttft_s`` is the
  median);
- ``ttfa_s``, ``ttfa_p90_s``, ``ttfa_p99_s``: median, 90th and 99th percentile of the time
  to the first answer token (TTFA: a reasoning model's thinking skipped, which TTFT
  counts); ``reasoning_tokens``: mean reasoning tokens per request;
- ``tpot_p50_s``, ``tpot_p90_s``, ``tpot_p99_s``: percentiles of time per output token;
- ``itl_p50_s``, ``itl_p90_s``, ``itl_p99_s``: percentiles of the gaps between
  token-bearing chunks, pooled over the run's requests;
- ``latency_p50_s``, ``latency_p90_s``, ``latency_p99_s``: percentiles of end-to-end
  latency (sending to the last byte);
- ``req_s``: request throughput, successful requests / wall time;
- ``slo_met``, ``goodput_tok_s``: the share of requests that met the profile's service
  levels (``[slo]``), and their output tokens per second; chosen whenever a profile sets
  service levels.
- ``schema_valid_rate``, ``tool_call_valid_rate``: the share of requests whose answer met
  what it asked (JSON valid against its ``response_format``; a valid call of an offered
  function); chosen whenever the workload's prompts ask (``structured``, ``tool-calls``).
  They do not drift with the host (``Figure.host_drift``): their tolerance is their own
  noise's, whatever the profile's ``min_tolerance``, and another host widens no limit.

The server's own view of the run (``/metrics`` sampled through the level,
:mod:`perfgate.measure.server`; chosen like the ones above):

- ``server_waiting_mean``, ``server_waiting_peak``: requests queued in the server (not yet
  running), mean and largest over the samples; ``server_kv_peak``: the largest share of
  its KV cache in use; ``server_preemptions``: requests preempted during the level;
  ``server_prefix_hit_rate``: prompt tokens the prefix cache held, of those looked up;
  ``server_tok_s``: the server's own count of generated tokens per second. Counts (queue,
  preemptions) are judged as count + 1 on the gate's log scale (``Figure.shift``), so a
  baseline of 0 still has a limit; their Δ% is of count + 1.

Figures of a whole measurement (no level), one value per capacity search
(:data:`SEARCH_FIGURES`, key ``<measurement>.<figure>``):

- ``max_concurrency``, ``max_req_s``: the highest concurrency, or request rate, a search
  probed whose ``slo_met`` reached the profile's target (``[capacity]``).

A figure read off token timestamps (``timing``) is only as exact as the harness: a
level's timing error bound (its event loop's lag, ``HarnessStats``) can move it, and
the gate says when that could change its verdict.
- ``scaling`` (levels above C=1): the aggregate tok/s of run i of the level over that of
  run i of C=1 (paired, so runs stay independent samples): the shape of concurrency
  scaling, which holds across machines where absolute tok/s does not. It is a
  hand-set, hardware-independent target (``any.json``); recording leaves it out, as an
  exact baseline holds every level's tok/s already.

The table, the gate, ``perfgate compare``, early abort, recording and the diagnosis
all read :data:`FIGURES`. Keys name a figure of one level of one measurement:
``<measurement>.c<C>.<figure>``, e.g. ``sweep.c4.agg_tok_s`` (``.r<rate>.`` for a request
rate), or a measurement-wide figure: ``capacity.max_req_s``."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from perfgate.measure.data import CapacitySearch, LevelData
from perfgate.measure.metrics import Distribution, LevelMetrics
from perfgate.measure.server import ServerSeries
from perfgate.registry import Registry
from perfgate.stats.estimate import Direction


@dataclass(frozen=True, slots=True)
class Figure:
    """One gated figure: what it is, which way is better, and its value in one run."""

    name: str
    title: str
    unit: str
    direction: Direction
    min_tolerance: float  # the floor of a tolerance derived from noise
    absent_when: str  # why a run may not produce it
    value: Callable[[LevelData], float | None]
    recorded: bool = True  # False: a hand-set target only, left out of recorded baselines
    timing: bool = False  # read off token timestamps: the harness's timing error applies
    chosen: bool = False  # True: measured and recorded only where a profile chooses it
    search: Callable[[CapacitySearch], float | None] | None = None  # measurement-wide
    # how it is shown: its terminal-table column's width and decimals (None: 4 for
    # seconds, else 2), a share as a percentage, a column only where some level read it
    width: int = 14
    decimals: int | None = None
    percent: bool = False
    sparse: bool = False
    # a count that is often 0 (queue, preemptions): the gate compares count + shift on its
    # log scale, so a baseline of 0 still has a limit; every table shows the count itself
    shift: float = 0.0
    # False: the figure does not move with the host (a share of valid answers), so the
    # allowances for host drift stay off it: the profile's min_tolerance at recording, and
    # the spread between hosts when judged on another host than the recording's
    host_drift: bool = True

    def run_values(self, runs: Iterable[LevelData]) -> list[float]:
        """One value per run that produced this figure."""
        return [v for run in runs if (v := self.value(run)) is not None]

    @property
    def places(self) -> int:
        """Decimals in a table cell."""
        if self.decimals is not None:
            return self.decimals
        return 4 if self.unit == "s" else 2

    def cell(self, value: float | None, width: int | None = None) -> str:
        """The value in a table column, right-aligned ('-' when None); a share in %."""
        shown = None if value is None else value * 100 if self.percent else value
        return number_cell(shown, self.width if width is None else width, self.places)

    def text(self, value: float | None, unit: str | None = None) -> str:
        """The value for people: a share as a percentage, else 4 significant digits and
        the unit ('-' when None)."""
        if value is None:
            return "-"
        if self.percent:
            return f"{value:.1%}"
        return f"{value:.4g} {self.unit if unit is None else unit}".strip()


def number_cell(value: float | None, width: int, decimals: int) -> str:
    """A number right-aligned in ``width`` ('-' when None)."""
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{decimals}f}"


def delta_pct(measured: float | None, base: float | None) -> float | None:
    """Δ%: how far ``measured`` is from ``base``, in percent of it (None when either is
    unknown). Every table, verdict and diagnosis reads this one."""
    if measured is None or base is None or not base:
        return None
    return (measured - base) / base * 100.0


def delta_text(delta: float | None, suffix: str = "") -> str:
    """Δ% for people: ``+12.5`` (``-`` when unknown)."""
    return "-" if delta is None else f"{delta:+.1f}{suffix}"


def _agg(run: LevelData) -> float | None:
    return run.metrics.agg_tok_s if run.metrics.ok else None


def _per_request(run: LevelData) -> float | None:
    return run.metrics.per_request_tok_s.p50


def _ttft(run: LevelData) -> float | None:
    return run.metrics.ttft_s.p50


def _accept(run: LevelData) -> float | None:
    return run.spec.accept_rate if run.spec is not None else None


FIGURES: list[Figure] = [
    Figure(
        "agg_tok_s",
        "Agg tok/s",
        "tok/s",
        "higher",
        0.02,
        "no request of the level succeeded",
        _agg,
        width=10,
    ),
    Figure(
        "per_request_tok_s",
        "Per-req tok/s",
        "tok/s",
        "higher",
        0.02,
        "no request of the level succeeded",
        _per_request,
    ),
    Figure(
        "ttft_s",
        "TTFT(s)",
        "s",
        "lower",
        0.05,
        "no request streamed a token",
        _ttft,
        timing=True,
        width=8,
        decimals=3,
    ),
    Figure(
        "accept_rate",
        "Accept%",
        "",
        "higher",
        0.02,
        "no speculative-decoding counters were read (speculation off, or the engine's "
        "counters renamed or gone)",
        _accept,
        width=7,
        decimals=1,
        percent=True,
        sparse=True,
    ),
]


SCALING = Figure(
    "scaling",
    "Scaling",
    "x",
    "higher",
    0.05,
    "the measurement has no successful C=1 run to pair with",
    _agg,  # divided by the paired C=1 run's in measurement_values
    recorded=False,
)


def _percentile_of(
    quantity: Callable[[LevelMetrics], Distribution], q: str
) -> Callable[[LevelData], float | None]:
    def value(run: LevelData) -> float | None:
        return getattr(quantity(run.metrics), q) if run.metrics.ok else None

    return value


def _req_s(run: LevelData) -> float | None:
    m = run.metrics
    return m.ok / m.wall_s if m.ok and m.wall_s > 0 else None


NO_ANSWER = "no request streamed answer text (content): it only reasoned, or failed"
NO_REASONING = "no request carried reasoning text (not a reasoning model, or no parser)"


def _reasoning_tokens(run: LevelData) -> float | None:
    return run.metrics.reasoning_tokens.mean if run.metrics.ok else None


PERCENTILE_QUANTITIES: tuple[tuple[str, str, Callable[[LevelMetrics], Distribution], str], ...] = (
    ("ttft", "TTFT", lambda m: m.ttft_s, "no request streamed a token"),
    ("ttfa", "TTFA", lambda m: m.ttfa_s, NO_ANSWER),
    ("tpot", "TPOT", lambda m: m.tpot_s, "no request streamed two tokens or more"),
    ("itl", "ITL", lambda m: m.itl_s, "no request streamed two chunks or more"),
    ("latency", "Latency", lambda m: m.latency_s, "no request of the level succeeded"),
)


def _slo_met(run: LevelData) -> float | None:
    return run.goodput.met_share if run.goodput is not None else None


def _goodput(run: LevelData) -> float | None:
    return run.goodput.goodput_tok_s if run.goodput is not None else None


NO_SLO = "the profile sets no service levels ([slo])"


SLO_FIGURES: tuple[Figure, ...] = (
    Figure("slo_met", "SLO met", "", "higher", 0.02, NO_SLO, _slo_met, chosen=True),
    Figure(
        "goodput_tok_s", "Goodput tok/s", "tok/s", "higher", 0.02, NO_SLO, _goodput, chosen=True
    ),
)


NO_SCHEMA = 'the requests asked for no response_format (workload.prompts = "structured")'
NO_TOOLS = 'the requests offered no tools (workload.prompts = "tool-calls")'


ANSWER_FIGURES: tuple[Figure, ...] = (  # chosen whenever the workload's prompts ask
    Figure(
        "schema_valid_rate",
        "Schema valid",
        "",
        "higher",
        0.02,
        NO_SCHEMA,
        lambda run: run.metrics.schema_valid_rate,
        chosen=True,
        percent=True,
        width=12,
        decimals=1,
        host_drift=False,
    ),
    Figure(
        "tool_call_valid_rate",
        "Calls valid",
        "",
        "higher",
        0.02,
        NO_TOOLS,
        lambda run: run.metrics.tool_call_valid_rate,
        chosen=True,
        percent=True,
        width=12,
        decimals=1,
        host_drift=False,
    ),
)


def _server(read: Callable[[ServerSeries], float | None]) -> Callable[[LevelData], float | None]:
    def value(run: LevelData) -> float | None:
        return read(run.server) if run.server is not None else None

    return value


NO_SERVER = (
    "the server's metrics gave no such value at this level (server.metrics_interval_s = 0, "
    "/metrics off, or the engine does not report it)"
)


SERVER_FIGURES: tuple[Figure, ...] = (
    Figure(
        "server_waiting_mean",
        "Queue mean",
        "requests",
        "lower",
        0.1,
        NO_SERVER,
        _server(lambda s: s.mean("waiting")),
        chosen=True,
        decimals=1,
        width=10,
        shift=1.0,
    ),
    Figure(
        "server_waiting_peak",
        "Queue peak",
        "requests",
        "lower",
        0.1,
        NO_SERVER,
        _server(lambda s: s.peak("waiting")),
        chosen=True,
        decimals=0,
        width=10,
        shift=1.0,
    ),
    Figure(
        "server_kv_peak",
        "KV peak",
        "",
        "lower",
        0.05,
        NO_SERVER,
        _server(lambda s: s.peak("kv_usage")),
        chosen=True,
        decimals=1,
        width=8,
        percent=True,
    ),
    Figure(
        "server_preemptions",
        "Preempted",
        "requests",
        "lower",
        0.1,
        NO_SERVER,
        _server(lambda s: s.preemptions),
        chosen=True,
        decimals=0,
        width=9,
        shift=1.0,
    ),
    Figure(
        "server_prefix_hit_rate",
        "Prefix hit%",
        "",
        "higher",
        0.05,
        NO_SERVER,
        _server(lambda s: s.prefix_hit_rate),
        chosen=True,
        decimals=1,
        width=11,
        percent=True,
    ),
    Figure(
        "server_tok_s",
        "Server tok/s",
        "tok/s",
        "higher",
        0.02,
        NO_SERVER,
        _server(lambda s: s.tok_s),
        chosen=True,
        width=12,
    ),
)


CHOSEN: list[Figure] = [
    *(
        Figure(
            f"{name}_{q}_s",
            f"{title} {q}(s)",
            "s",
            "lower",
            0.05,
            absent,
            _percentile_of(quantity, q),
            timing=True,
            chosen=True,
        )
        for name, title, quantity, absent in PERCENTILE_QUANTITIES
        for q in ("p50", "p90", "p99")
        if q != "p50" or name not in ("ttft", "ttfa")  # those are ``ttft_s``, ``ttfa_s``
    ),
    Figure(
        "ttfa_s",
        "TTFA(s)",
        "s",
        "lower",
        0.05,
        NO_ANSWER,
        _percentile_of(lambda m: m.ttfa_s, "p50"),
        timing=True,
        chosen=True,
        width=8,
        decimals=3,
    ),
    Figure(
        "reasoning_tokens",
        "Reasoning tok",
        "tokens",
        "lower",
        0.02,
        NO_REASONING,
        _reasoning_tokens,
        chosen=True,
        decimals=1,
        shift=1.0,
    ),
    Figure(
        "req_s",
        "Req/s",
        "req/s",
        "higher",
        0.02,
        "no request of the level succeeded",
        _req_s,
        chosen=True,
    ),
    *SLO_FIGURES,
    *ANSWER_FIGURES,
    *SERVER_FIGURES,
]


def _never(_: LevelData) -> float | None:
    return None


def _capacity(by: str) -> Callable[[CapacitySearch], float | None]:
    def value(search: CapacitySearch) -> float | None:
        return search.capacity if search.by == by else None

    return value


NO_SEARCH = "no capacity search finished (the profile sets no [capacity], or it did not run)"


SEARCH_FIGURES: list[Figure] = [
    Figure(
        "max_concurrency",
        "Capacity (C)",
        "in flight",
        "higher",
        0.1,
        NO_SEARCH,
        _never,
        search=_capacity("concurrency"),
    ),
    Figure(
        "max_req_s",
        "Capacity req/s",
        "req/s",
        "higher",
        0.1,
        NO_SEARCH,
        _never,
        search=_capacity("rate"),
    ),
]


BY_NAME: Registry[Figure] = Registry("figure")
BY_NAME.update((f.name, f) for f in (*FIGURES, SCALING, *CHOSEN, *SEARCH_FIGURES))


def register(figure: Figure) -> None:
    """Add a figure to the registry: a default one (measured and judged at every level),
    a ``chosen`` one, or a measurement-wide one (``search``). Tables, CSV, Markdown,
    verdicts, baselines and history all read the registry; nothing else changes."""
    BY_NAME.register(figure.name, figure)  # a name taken twice is a ValueError
    group = SEARCH_FIGURES if figure.search else CHOSEN if figure.chosen else FIGURES
    group.append(figure)


def unregister(name: str) -> None:
    """Remove a registered figure (KeyError when none has that name)."""
    figure = BY_NAME.unregister(name)
    for group in (FIGURES, CHOSEN, SEARCH_FIGURES):
        if figure in group:
            group.remove(figure)


def unknown_figures(names: Iterable[str]) -> list[str]:
    """Names in ``names`` that are not figures a profile can choose (``gate.figures``)."""
    choosable = {f.name for f in CHOSEN}
    return [n for n in names if n not in choosable]


def judged_figures(chosen: Collection[str] = ()) -> tuple[Figure, ...]:
    """The figures a level produces: every default one, and the ``chosen`` ones."""
    return (*FIGURES, *(f for f in CHOSEN if f.name in chosen))
