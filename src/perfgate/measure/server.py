"""The server's own view of a level run: its ``/metrics`` sampled beside the measured
requests (queue depth, requests running, KV-cache use every ``interval_s``) and its
counters (preemptions, prefix-cache hits, generated tokens) read once as the measured
requests start and once as they end.

A :class:`ServerSampler` reads on its own thread, never on the event loop that times the
streams. Its cost is measured: the CPU time its thread spent (fetching and scanning the
text) is kept with the series, beside the harness's own loop lag."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx
from pydantic import BaseModel, Field

from perfgate.engines.server_metrics import COUNTERS, GAUGES, MetricMap, Reading, read_metrics
from perfgate.http_clients import NETWORK, HttpClients
from perfgate.measure.metrics import LevelMetrics

MILLISECONDS = 1000


class ServerSeries(BaseModel):
    """The server's metrics over one level run's measured requests: gauges sampled every
    ``interval_s`` (times in ms after the first read), counters read at both ends."""

    interval_s: float
    t_ms: list[int] = Field(default_factory=list, description="Sample times, ms after open.")
    gauges: dict[str, list[float | None]] = Field(
        default_factory=dict,
        description="running, waiting, kv_usage at each sample (None: that read failed).",
    )
    before: dict[str, float] = Field(default_factory=dict, description="Counters at open.")
    after: dict[str, float] = Field(default_factory=dict, description="Counters at close.")
    span_s: float = Field(0.0, description="Seconds between the two counter reads.")
    sources: dict[str, str] = Field(
        default_factory=dict, description="The Prometheus name each word was read from."
    )
    prefix_hits: float | None = Field(
        None, description="Prefix-cache hits over the level, where responses reported them."
    )
    prefix_queries: float | None = None
    failed_reads: int = 0
    sampler_cpu_s: float = Field(0.0, description="CPU time of the sampler's thread.")

    def _gauge(self, word: str) -> list[float]:
        return [v for v in self.gauges.get(word, []) if v is not None]

    def mean(self, word: str) -> float | None:
        """A gauge's mean over the samples (None: not read)."""
        values = self._gauge(word)
        return sum(values) / len(values) if values else None

    def peak(self, word: str) -> float | None:
        """A gauge's largest sample (None: not read)."""
        values = self._gauge(word)
        return max(values) if values else None

    def delta(self, word: str) -> float | None:
        """A counter's increase over the level (None: not read at both ends)."""
        if word not in self.before or word not in self.after:
            return None
        return self.after[word] - self.before[word]

    @property
    def preemptions(self) -> float | None:
        """Requests preempted during the level."""
        return self.delta("preemptions")

    @property
    def prefix_hit_rate(self) -> float | None:
        """Share of prompt tokens the prefix cache held (None: not reported, or no lookup)."""
        hits, queries = self.delta("prefix_hits"), self.delta("prefix_queries")
        if hits is None or queries is None:
            hits, queries = self.prefix_hits, self.prefix_queries
        if hits is None or not queries:
            return None
        return hits / queries

    @property
    def generated_tokens(self) -> float | None:
        """Output tokens the server counted during the level."""
        return self.delta("server_generated_tokens")

    @property
    def tok_s(self) -> float | None:
        """The server's own output token rate between the two counter reads."""
        tokens = self.generated_tokens
        return tokens / self.span_s if tokens is not None and self.span_s > 0 else None

    @property
    def samples(self) -> int:
        """Gauge samples taken."""
        return len(self.t_ms)

    def cpu_share(self) -> float | None:
        """The sampler's CPU time as a share of the level's span."""
        return self.sampler_cpu_s / self.span_s if self.span_s > 0 else None

    def describe(self) -> str:
        """The sampler's own cost, for the level's progress line."""
        share = self.cpu_share()
        cost = "" if share is None else f", {share:.2%} of a core"
        failed = f", {self.failed_reads} reads failed" if self.failed_reads else ""
        return f"server /metrics: {self.samples} samples{cost}{failed}"


Fetch = Callable[[], str | None]


def http_fetch(
    base_url: str, path: str, headers: dict[str, str], clients: HttpClients = NETWORK
) -> tuple[Fetch, Callable[[], None]]:
    """A fetch of the server's metrics text over one kept-alive connection (None: the read
    failed), and the function that closes it."""
    client = clients.client(base_url, timeout=5.0, headers=headers)

    def fetch() -> str | None:
        try:
            response = client.get(path)
        except httpx.HTTPError:
            return None
        return response.text if response.status_code == 200 else None

    return fetch, client.close


class ServerSampler:
    """Reads the server's metrics at :meth:`open` and :meth:`close`, and its gauges every
    ``interval_s`` on a thread between them."""

    part = "server"  # the level's data it fills (a Sampler: perfgate.measure.samplers)

    def __init__(self, fetch: Fetch, metric_map: MetricMap, interval_s: float) -> None:
        self.fetch = fetch
        self.metric_map = metric_map
        self.interval_s = interval_s
        self.series: ServerSeries | None = None
        self._opened = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.last_text: str | None = None  # the latest text read at open or close
        self._gauges = [w for w in GAUGES if w in metric_map.names]

    def _read(self) -> Reading | None:
        text = self.fetch()
        if text is None:
            return None
        self.last_text = text
        return read_metrics(text, self.metric_map)

    def open(self) -> None:
        """The measured requests start: read the counters, start sampling the gauges."""
        cpu_start = time.thread_time()
        self._opened = time.perf_counter()
        series = ServerSeries(interval_s=self.interval_s)
        first = self._read()
        if first is not None:
            series.before = {w: v for w, v in first.values.items() if w in COUNTERS}
            series.sources.update(first.sources)
            self._append(series, first, 0.0)
        else:
            series.failed_reads += 1
        series.sampler_cpu_s = time.thread_time() - cpu_start
        self.series = series
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="perfgate-server-metrics")
        self._thread.daemon = True
        self._thread.start()

    def _append(self, series: ServerSeries, reading: Reading | None, at_s: float) -> None:
        with self._lock:
            series.t_ms.append(round(at_s * MILLISECONDS))
            for word in self._gauges:
                value = None if reading is None else reading.values.get(word)
                series.gauges.setdefault(word, []).append(value)
            if reading is None:
                series.failed_reads += 1

    def _loop(self) -> None:
        cpu_start = time.thread_time()
        series = self.series
        assert series is not None
        while not self._stop.wait(self.interval_s):
            reading = self._read()
            self._append(series, reading, time.perf_counter() - self._opened)
            if reading is not None:
                series.sources.update(reading.sources)
        series.sampler_cpu_s += time.thread_time() - cpu_start

    def close(self) -> ServerSeries | None:
        """The measured requests ended: stop sampling, read the counters again."""
        self.stop()
        series, self.series = self.series, None
        if series is None:
            return None
        cpu_start = time.thread_time()
        last = self._read()
        series.span_s = time.perf_counter() - self._opened
        if last is not None:
            series.after = {w: v for w, v in last.values.items() if w in COUNTERS}
            series.sources.update(last.sources)
            self._append(series, last, series.span_s)
        else:
            series.failed_reads += 1
        series.gauges = {w: v for w, v in series.gauges.items() if any(x is not None for x in v)}
        series.sampler_cpu_s += time.thread_time() - cpu_start
        return series

    def stop(self) -> None:
        """End the sampling thread (interrupted mid-level, or closing)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)
            self._thread = None


def token_gap(series: ServerSeries, metrics: LevelMetrics) -> str | None:
    """What to say when the server's count of generated tokens and the client's differ by
    more than one token a request (None: they agree, or the server counts none). A gap
    says the client lost or miscounted tokens, or another client used the server."""
    server = series.generated_tokens
    if server is None or not metrics.ok:
        return None
    client = metrics.output_tokens
    allowed = max(metrics.ok + metrics.fail, 1)
    if abs(server - client) <= allowed:
        return None
    source = series.sources.get("server_generated_tokens", "its counter")
    return (
        f"C={metrics.concurrency}: the server generated {server:.0f} tokens ({source}), the "
        f"client counted {client} over {metrics.ok} requests ({server - client:+.0f}): the "
        "client lost or miscounted tokens, or another client used the server during the level"
    )
