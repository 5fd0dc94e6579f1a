"""An EAGLE drafter for a Llama-architecture target with random weights: the shape vLLM
loads (``EagleLlamaForCausalLM``: one decoder layer and the ``fc`` that joins the token
embedding with the target's hidden state), none of the training. Served with it, vLLM
drafts tokens the target almost never accepts: the seeds' failure, a drafter that guesses
wrong, made on purpose.

Run with the vLLM environment's Python (it has torch and safetensors):

    .venv-vllm/bin/python scripts/random_eagle_drafter.py TARGET_DIR OUT_DIR [--seed 0]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import save_file


def drafter_weights(config: dict, seed: int) -> dict[str, torch.Tensor]:
    """Layer 0 of the target's shape and the ``fc`` projection, drawn at random (std
    0.02, as a freshly initialised model); the embedding and LM head come from the target
    (vLLM shares them when the drafter has none)."""
    generator = torch.Generator().manual_seed(seed)
    hidden = config["hidden_size"]
    inter = config["intermediate_size"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    q_out = config["num_attention_heads"] * head_dim
    kv_out = config["num_key_value_heads"] * head_dim

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=generator) * 0.02).to(torch.bfloat16)

    layer = "layers.0."
    return {
        "fc.weight": rand(hidden, 2 * hidden),
        f"{layer}self_attn.q_proj.weight": rand(q_out, hidden),
        f"{layer}self_attn.k_proj.weight": rand(kv_out, hidden),
        f"{layer}self_attn.v_proj.weight": rand(kv_out, hidden),
        f"{layer}self_attn.o_proj.weight": rand(hidden, q_out),
        f"{layer}mlp.gate_proj.weight": rand(inter, hidden),
        f"{layer}mlp.up_proj.weight": rand(inter, hidden),
        f"{layer}mlp.down_proj.weight": rand(hidden, inter),
        f"{layer}post_attention_layernorm.weight": torch.ones(hidden, dtype=torch.bfloat16),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", type=Path, help="the target model's Hugging Face directory")
    parser.add_argument("out", type=Path, help="where to write the drafter")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    config = json.loads((args.target / "config.json").read_text())
    if config.get("model_type") != "llama":
        raise SystemExit(f"{args.target}: an EAGLE drafter of this shape needs a Llama target")
    args.out.mkdir(parents=True, exist_ok=True)
    drafter = {**config, "architectures": ["EagleLlamaForCausalLM"], "num_hidden_layers": 1}
    (args.out / "config.json").write_text(json.dumps(drafter, indent=2) + "\n")
    save_file(drafter_weights(config, args.seed), str(args.out / "model.safetensors"))
    print(f"random EAGLE drafter for {args.target.name} written to {args.out}")


if __name__ == "__main__":
    main()
