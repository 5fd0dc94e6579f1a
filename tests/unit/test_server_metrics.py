"""The server's own metrics: each engine's names read into one vocabulary (from captures of
real servers), the sampler's series and counters, and the figures read off them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from perfgate.engines import get_engine
from perfgate.engines.server_metrics import MetricMap, read_metrics
from perfgate.measure.metrics import LevelMetrics
from perfgate.measure.server import ServerSampler, ServerSeries, token_gap

DATA = Path(__file__).parents[1] / "data" / "server_metrics"


def reading(engine: str, capture: str) -> dict[str, float]:
    text = (DATA / capture).read_text()
    return read_metrics(text, get_engine(engine).metric_map).values


def test_sglang_names_read_from_the_real_sglang_0_5_23_on_this_cpu():
    """Captured here from SGLang 0.5.23 under load (see the file's header)."""
    assert reading("sglang", "sglang-cpu-0.5.23.prom") == {
        "running": 6.0,
        "waiting": 0.0,
        "kv_usage": 0.19,
        "prefix_hits": 156.0,
        "prefix_queries": 223.0,
        "server_generated_tokens": 272.0,
    }


def test_sglang_names_read_from_a_public_capture_of_sglang_0_5_10():
    """DataDog's fixture, labelled as captured from SGLang v0.5.10.post1 (see the file)."""
    values = reading("sglang", "sglang-0.5.10-datadog.prom")
    assert values == {
        "running": 0.0,
        "waiting": 0.0,
        "kv_usage": 0.25,
        "prefix_hits": 1.0,
        "prefix_queries": 5.0,
        "server_generated_tokens": 32.0,
    }
    assert "preemptions" not in values  # a gauge of retractions is not a count: absent


def test_sglang_names_read_from_the_capture_in_sglang_pr_7944():
    values = reading("sglang", "sglang-pd-deepseek-r1.prom")
    assert values == {"running": 0.0, "kv_usage": 0.0, "prefix_hits": 2688.0}
    # that server printed no queue gauge nor token counters in the excerpt: absent, not 0
    assert "waiting" not in values and "server_generated_tokens" not in values


def test_the_sglang_underscore_spelling_reads_the_same():
    text = (DATA / "sglang-0.5.10-datadog.prom").read_text().replace("sglang:", "sglang_")
    assert read_metrics(text, get_engine("sglang").metric_map).values["kv_usage"] == 0.25


@pytest.mark.parametrize(
    ("engine", "capture"),
    [
        ("vllm", "vllm-cpu-0.32.0.prom"),
        ("llamacpp", "llamacpp-server.prom"),
        ("sglang", "sglang-cpu-0.5.23.prom"),
    ],
)
def test_real_captures_give_every_word_the_engine_maps(engine, capture):
    """Captured here from the real servers (each file says how); what the map names and
    the server exposed is read, and nothing else appears."""
    metric_map = get_engine(engine).metric_map
    text = (DATA / capture).read_text()
    got = read_metrics(text, metric_map)
    exposed = {line.split("{")[0].split()[0] for line in text.splitlines() if line[:1] not in "#"}
    expected = {
        w
        for w, names in metric_map.names.items()
        if any(set(n.split("+")) <= exposed for n in names)
    }
    assert set(got.values) == expected
    assert expected, "the capture exposes none of the mapped names"
    assert all(set(got.sources[w].split("+")) <= exposed for w in got.values)


def test_the_values_of_the_real_captures():
    """What the servers said at the moment of capture (see each file's header)."""
    assert reading("vllm", "vllm-cpu-0.32.0.prom") == {
        "running": 8.0,
        "waiting": 0.0,
        "kv_usage": pytest.approx(0.010475774770842383),
        "preemptions": 0.0,
        "prefix_hits": 0.0,
        "prefix_queries": 196.0,
        "server_generated_tokens": 721.0,
    }
    # llama.cpp: 2 slots busy; prompt_tokens_total excludes the 8 tokens the cache held
    assert reading("llamacpp", "llamacpp-server.prom") == {
        "running": 2.0,
        "waiting": 0.0,
        "server_generated_tokens": 96.0,
        "prefix_hits": 8.0,
        "prefix_queries": 32.0,
    }


def test_label_sets_are_summed_and_kv_usage_takes_the_fullest_rank():
    """Written for this test: two data-parallel ranks, as a DP server labels them."""
    text = "\n".join(
        [
            'vllm:num_requests_running{engine="0"} 3',
            'vllm:num_requests_running{engine="1"} 4',
            'vllm:kv_cache_usage_perc{engine="0"} 0.5',
            'vllm:kv_cache_usage_perc{engine="1"} 0.75',
            'vllm:num_preemptions_total{engine="0"} 2',
            'vllm:num_preemptions_total{engine="1"} 1 1700000000000',  # with a timestamp
            'vllm:num_preemptions_created{engine="0"} 1.7e9',  # not the counter
            'vllm:num_requests_waiting{engine="0"} NaN',  # not a reading
        ]
    )
    got = read_metrics(text, get_engine("vllm").metric_map).values
    assert got == {"running": 7.0, "kv_usage": 0.75, "preemptions": 3.0}


def test_the_first_spelling_the_server_exposes_wins():
    metric_map = MetricMap({"kv_usage": ("new:kv", "old:kv")})
    assert read_metrics("old:kv 0.5\n", metric_map).sources == {"kv_usage": "old:kv"}
    both = read_metrics("old:kv 0.5\nnew:kv 0.25\n", metric_map)
    assert both.values == {"kv_usage": 0.25} and both.sources == {"kv_usage": "new:kv"}


class Scripted:
    """A /metrics that answers each read from a list, the last one repeated (None: the
    read fails), and ``final`` once ``done`` is set."""

    def __init__(self, texts: list[str | None], final: str | None = None) -> None:
        self.texts = texts
        self.final = final
        self.done = False
        self.reads = 0

    def __call__(self) -> str | None:
        if self.done:
            return self.final
        text = self.texts[min(self.reads, len(self.texts) - 1)]
        self.reads += 1
        return text

    def wait_for(self, reads: int) -> None:
        deadline = time.monotonic() + 10.0
        while self.reads < reads and time.monotonic() < deadline:
            time.sleep(0.005)


def exposition(running: int, waiting: int, kv: float, preempted: int, generated: int) -> str:
    return (
        f"vllm:num_requests_running {running}\nvllm:num_requests_waiting {waiting}\n"
        f"vllm:kv_cache_usage_perc {kv}\nvllm:num_preemptions_total {preempted}\n"
        f"vllm:generation_tokens_total {generated}\n"
    )


def test_the_sampler_keeps_gauges_through_the_level_and_counters_at_both_ends():
    texts = [
        exposition(0, 0, 0.0, 5, 1000),  # open
        exposition(4, 2, 0.5, 6, 1100),
        None,  # a failed read: a gap, never a zero
        exposition(4, 6, 1.0, 9, 1200),
    ]
    fetch = Scripted(texts, final=exposition(1, 0, 0.25, 12, 1500))
    sampler = ServerSampler(fetch, get_engine("vllm").metric_map, interval_s=0.01)
    sampler.open()
    fetch.wait_for(4)
    sampler.stop()
    fetch.done = True  # the close reads the final text
    series = sampler.close()
    assert series is not None
    assert series.before == {"preemptions": 5.0, "server_generated_tokens": 1000.0}
    assert series.after == {"preemptions": 12.0, "server_generated_tokens": 1500.0}
    assert series.preemptions == 7.0 and series.generated_tokens == 500.0
    assert series.gauges["waiting"][:4] == [0.0, 2.0, None, 6.0]
    assert series.peak("waiting") == 6.0 and series.peak("kv_usage") == 1.0
    assert series.failed_reads >= 1
    assert len(series.t_ms) == len(series.gauges["running"])
    assert series.t_ms == sorted(series.t_ms)
    assert series.span_s > 0 and series.tok_s == pytest.approx(500.0 / series.span_s)
    assert series.prefix_hit_rate is None  # vLLM's prefix counters not in this text
    assert series.sampler_cpu_s >= 0.0


def test_a_word_the_server_does_not_expose_is_absent_not_zero():
    fetch = Scripted(["vllm:num_requests_running 2\n"])
    sampler = ServerSampler(fetch, get_engine("vllm").metric_map, interval_s=0.01)
    sampler.open()
    series = sampler.close()
    assert series is not None
    assert set(series.gauges) == {"running"}
    assert series.mean("waiting") is None and series.peak("kv_usage") is None
    assert series.preemptions is None and series.tok_s is None


def test_a_server_that_answers_no_read_gives_a_series_without_samples():
    sampler = ServerSampler(Scripted([None]), get_engine("vllm").metric_map, interval_s=0.01)
    sampler.open()
    series = sampler.close()
    assert series is not None and series.samples == 0 and series.failed_reads >= 2


def test_prefix_hit_rate_from_counters_else_from_response_timings():
    counted = ServerSeries(
        interval_s=0.5, before={"prefix_hits": 10, "prefix_queries": 100},
        after={"prefix_hits": 70, "prefix_queries": 180},
    )  # fmt: skip
    assert counted.prefix_hit_rate == pytest.approx(60 / 80)
    reported = ServerSeries(interval_s=0.5, prefix_hits=30, prefix_queries=120)
    assert reported.prefix_hit_rate == pytest.approx(0.25)
    assert ServerSeries(interval_s=0.5, prefix_hits=0, prefix_queries=0).prefix_hit_rate is None


def test_llamacpp_counts_prefix_hits_from_each_responses_timings():
    engine = get_engine("llamacpp")
    timings = [{"cache_n": 96, "prompt_n": 32}, {"cache_n": 0, "prompt_n": 128}, {}]
    assert engine.prefix_counts(timings) == (96.0, 256.0)
    assert engine.prefix_counts([{}]) is None
    assert get_engine("vllm").prefix_counts(timings) is None


def metrics(ok: int, output_tokens: int, fail: int = 0) -> LevelMetrics:
    """What the token check reads of a level's metrics (the rest left unset)."""
    return LevelMetrics.model_construct(
        concurrency=4, ok=ok, fail=fail, output_tokens=output_tokens
    )


def test_the_servers_token_count_agrees_with_the_clients_within_a_token_a_request():
    series = ServerSeries(
        interval_s=0.5, before={"server_generated_tokens": 100},
        after={"server_generated_tokens": 100 + 12 * 64 + 5},
        sources={"server_generated_tokens": "vllm:generation_tokens_total"},
    )  # fmt: skip
    assert token_gap(series, metrics(12, 12 * 64)) is None  # 5 over 12 requests: within
    gap = token_gap(series, metrics(12, 12 * 60))
    assert gap is not None and "+53" in gap and "vllm:generation_tokens_total" in gap
    assert token_gap(ServerSeries(interval_s=0.5), metrics(12, 10)) is None  # not counted
