#!/usr/bin/env bash
# Real SGLang (PyPI sglang 0.5.23) for the sglang-cpu-smollm2 profile, in its own virtual
# environment (.venv-sglang by default), where perfgate finds it.
#
# SGLang's supported CPU build needs sgl-kernel compiled from GitHub source, and PyPI's
# kernel wheels are CUDA-only. So: SGLang's own dependencies without the CUDA-only ones,
# sglang itself with --no-deps, and perfgate's stand-in for the one kernel op the CPU path
# calls (scripts/sgl_kernel_standin: assign_req_to_token_pool_cpu in torch; any other op
# raises). SGLang's scheduler, API, tokenizer, metrics and logs are real; attention runs on
# its torch-native backend. PyPI's torch (a CUDA build) runs on the CPU: a "+cpu" torch with
# PyPI's torchvision fails on torchvision::nms. About 4.5 minutes cold, 7 GB.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv-sglang}
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
# sglang 0.5.23's Requires-Dist, less: cuda-python, flash-attn-4, flashinfer_python,
# humming-kernels, nvidia-cutlass-dsl, nvidia-mathdx, nvshmem4py-cu13, quack-kernels,
# sgl-deep-ep, sgl-deep-gemm, sgl-flash-mla, sglang-kernel, tilelang, apache-tvm-ffi,
# torch_memory_saver (CUDA), torchaudio, torchcodec (audio/video input only)
"$venv/bin/pip" install --quiet \
  "torch==2.14.1" "torchvision==0.29.1" "accelerate>=1.0" "timm==1.0.25" \
  aiohttp "anthropic>=0.20.0" "blobfile==3.0.0" build "compressed-tensors==0.18.0" datasets \
  distro easydict einops fastapi gguf interegular IPython "kernels>=0.14.1,<0.15" \
  "llguidance>=1.7.6,<2.0.0" "mistral_common>=1.11.5" modelscope msgspec ninja \
  "numba==0.65.1" numpy nvidia-ml-py "openai==2.8.0" "openai-harmony==0.0.4" orjson \
  "outlines==0.1.11" packaging partial_json_parser pillow "prometheus-client>=0.20.0" \
  psutil pybase64 pydantic "python-dateutil<3" python-multipart "pyzmq>=25.1.2" regex \
  requests scipy "sentencepiece==0.2.1" setproctitle "smg-grpc-servicer>=0.9.0" \
  "soundfile==0.13.1" tiktoken "tokenizers==0.23.2" tqdm "transformers==5.19.0" \
  "uvicorn>=0.51" uvloop watchfiles "xgrammar==0.2.7" xxhash zstandard \
  "deepseek-recipe==0.2.0" "tml-renderers==0.1.0"
"$venv/bin/pip" install --quiet --no-deps "sglang==0.5.23"
"$venv/bin/pip" install --quiet --no-deps ./scripts/sgl_kernel_standin
"$venv/bin/python" -c "import sglang; print('SGLang', sglang.__version__, 'in $venv')"
