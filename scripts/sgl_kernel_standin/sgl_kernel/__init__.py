"""A stand-in for ``sgl_kernel`` on a CPU, for perfgate's tests of a real SGLang server.

SGLang's supported CPU kernels come from sgl-kernel built from source; PyPI's wheels are
CUDA-only. With ``SGLANG_USE_CPU_ENGINE=1`` and the torch-native attention backend, the
path perfgate serves calls one op of this package, ``assign_req_to_token_pool_cpu``: it is
here, in plain torch. Every other name imports (SGLang's CPU modules import several at
load) and raises, when called, an error saying what this is: SGLang's scheduler, API,
tokenizer, metrics and logs are real; its kernels are not.
"""

from __future__ import annotations

import torch

__version__ = "0.0.0+perfgate.standin"


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    max_len: int,
) -> None:
    """For each request i, write its slice of ``out_cache_loc`` (the requests' new KV
    locations, one after another) into ``req_to_token[req_pool_indices[i],
    start_offset[i]:end_offset[i]]``."""
    offset = 0
    for row, start, end in zip(
        req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist(), strict=True
    ):
        count = end - start
        if count <= 0:
            continue
        if end > max_len:
            raise ValueError(f"request row {row}: end {end} past the pool's {max_len} tokens")
        req_to_token[row, start:end] = out_cache_loc[offset : offset + count].to(req_to_token.dtype)
        offset += count


class NotInStandIn(NotImplementedError):
    """An sgl_kernel op this stand-in does not have was called."""


def __getattr__(name: str) -> object:
    """Any other op: importable (SGLang's CPU modules import several at load), and a clear
    error the moment it is called."""
    if name.startswith("__"):
        raise AttributeError(name)

    def missing(*args: object, **kwargs: object) -> None:
        raise NotInStandIn(
            f"sgl_kernel.{name} was called, and perfgate's CPU stand-in has only "
            "assign_req_to_token_pool_cpu: this SGLang path needs the real sgl-kernel, "
            "built from source for CPU (see scripts/install-sglang-cpu.sh)"
        )

    missing.__name__ = name
    return missing
