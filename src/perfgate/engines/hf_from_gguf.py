"""Turn a GGUF model into a Hugging Face directory that vLLM can serve.

Run by file path with the *engine's* Python (it needs transformers, torch and gguf, which
a vLLM environment has; it imports nothing from perfgate):

    python .../perfgate/engines/hf_from_gguf.py MODEL.gguf OUT_DIR

transformers loads the GGUF, dequantizes it to bfloat16 and saves safetensors. Its GGUF
quantizer marker is dropped first (the weights are plain tensors by then; without this
``save_pretrained`` refuses). The tokenizer keeps the GGUF's BOS setting: Gemma without
its BOS token produces loops (see docs/correctness.md). Writes to a temporary sibling, then renames,
so an interrupted conversion never leaves a half directory behind.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path


def gguf_adds_bos(gguf_path: Path) -> bool:
    """The GGUF's ``tokenizer.ggml.add_bos_token`` (False when absent)."""
    from gguf import GGUFReader

    field = GGUFReader(gguf_path).fields.get("tokenizer.ggml.add_bos_token")
    return bool(field.parts[field.data[0]][0]) if field is not None else False


def convert(gguf_path: Path, out_dir: Path) -> None:
    """Write ``out_dir`` (config, safetensors, tokenizer) from ``gguf_path``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.monotonic()
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    source, name = str(gguf_path.parent), gguf_path.name
    print(f"hf_from_gguf: loading {gguf_path}", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(
        source, gguf_file=name, add_bos_token=gguf_adds_bos(gguf_path)
    )
    model = AutoModelForCausalLM.from_pretrained(source, gguf_file=name, dtype=torch.bfloat16)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    print(f"hf_from_gguf: wrote {out_dir} in {time.monotonic() - started:.0f}s", flush=True)


def main(argv: list[str]) -> int:
    """Command line: GGUF OUT_DIR."""
    if len(argv) != 2:
        print("usage: hf_from_gguf.py MODEL.gguf OUT_DIR", file=sys.stderr)
        return 2
    convert(Path(argv[0]), Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
