"""Correctness judgements: degenerate-text detectors, known answers, code run in a sandbox.

Every detector is a pure function of the text returning a number; ``degeneracy``
compares the numbers with a profile's limits. The sandbox runs untrusted generated
code in a child Python with a timeout, resource limits, a temporary directory as its
only writable place, and no network or subprocesses.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import unicodedata
import zlib
from dataclasses import dataclass
from pathlib import Path

from perfgate.profile import DegeneracyLimits

_WORD = re.compile(r"\S+")


@dataclass(frozen=True, slots=True)
class Finding:
    """One detector's measurement of one text."""

    detector: str
    value: float
    limit: float
    ok: bool

    def __str__(self) -> str:
        state = "ok" if self.ok else "DEGENERATE"
        return f"{self.detector}={self.value:.3g} (limit {self.limit:.3g}) {state}"


def loop_fraction(text: str, min_repeats: int = 3, window: int = 2000) -> float:
    """Share of the text (characters) inside a pattern repeating at least ``min_repeats``
    times at its end. Character-based, so loops without spaces count too."""
    tail = text[-window:]
    n = len(tail)
    best = 0
    for period in range(1, n // min_repeats + 1):
        i = n - 1 - period
        while i >= 0 and tail[i] == tail[i + period]:
            i -= 1
        covered = n - 1 - i
        if covered >= min_repeats * period:
            best = max(best, covered)
    return best / n if n else 0.0


def distinct_ngram_ratio(text: str, n: int = 3) -> float:
    """Distinct word n-grams over all word n-grams (1.0 for texts shorter than n words)."""
    words = _WORD.findall(text)
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 1.0


def compression_ratio(text: str) -> float:
    """Raw bytes over zlib-compressed bytes."""
    raw = text.encode()
    return len(raw) / len(zlib.compress(raw, 9)) if raw else 1.0


_SPECIAL_TOKEN = re.compile(r"<\|[^<>|]{1,40}\|>|<[a-z]+(?:_[a-z]+)+>")


def garbage_fraction(text: str) -> float:
    """Share of characters that no sane answer contains: controls, U+FFFD, unassigned, and
    leaked special tokens such as ``<start_of_image>`` or ``<|im_end|>``."""
    if not text:
        return 0.0
    total = len(text)
    bad = sum(len(m) for m in _SPECIAL_TOKEN.findall(text))
    text = _SPECIAL_TOKEN.sub("", text)
    for ch in text:
        if ch in "\n\t\r":
            continue
        category = unicodedata.category(ch)
        if ch == "\ufffd" or category in ("Cc", "Cn", "Co", "Cs"):
            bad += 1
    return bad / total


def degeneracy(text: str, limits: DegeneracyLimits) -> list[Finding]:
    """Every detector's finding for one text."""
    findings = [
        Finding(
            "chars", len(text.strip()), limits.min_chars, len(text.strip()) >= limits.min_chars
        ),
        Finding(
            "garbage_fraction",
            g := garbage_fraction(text),
            limits.max_garbage_fraction,
            g <= limits.max_garbage_fraction,
        ),
    ]
    if len(_WORD.findall(text)) >= limits.min_words:
        loop, distinct, ratio = (
            loop_fraction(text),
            distinct_ngram_ratio(text),
            compression_ratio(text),
        )
        findings += [
            Finding(
                "loop_fraction", loop, limits.max_loop_fraction, loop <= limits.max_loop_fraction
            ),
            Finding(
                "distinct_3grams",
                distinct,
                limits.min_distinct_3grams,
                distinct >= limits.min_distinct_3grams,
            ),
            Finding(
                "compression_ratio",
                ratio,
                limits.max_compression_ratio,
                ratio <= limits.max_compression_ratio,
            ),
        ]
    return findings


def is_degenerate(text: str, limits: DegeneracyLimits) -> list[Finding]:
    """The failing findings (empty when the text looks like normal output)."""
    return [f for f in degeneracy(text, limits) if not f.ok]


# End-of-sequence and turn markers of common chat templates; ``<|...|>`` forms of any name
# are caught by _SPECIAL_TOKEN as well.
END_MARKERS = (
    "<eos>",
    "</s>",
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|end|>",
    "<end_of_turn>",
    "<start_of_turn>",
    "<|im_start|>",
    "<\uff5cend\u2581of\u2581sentence\uff5c>",
)


def leaked_markers(text: str) -> list[str]:
    """End-of-sequence, turn and other special-token markers that appear in a text (an
    engine that prints them did not stop, or did not strip, where it should)."""
    found = [m for m in END_MARKERS if m in text]
    found += [m for m in _SPECIAL_TOKEN.findall(text) if m not in found]
    return found


def contains_answer(text: str, answers: list[str]) -> bool:
    """Whether any accepted answer appears as a word or phrase (case-insensitive)."""
    lowered = text.lower()
    return any(re.search(rf"(?<!\w){re.escape(a.lower())}(?!\w)", lowered) for a in answers)


# --- code extraction and the sandbox ---------------------------------------------------

_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


def extract_code(text: str, prefix: str = "") -> str:
    """The Python code in an answer: the first fenced block, else ``prefix + text`` up to
    the end of the first top-level block (a base model's completion of a ``def`` goes on
    with more functions, the last one cut off by max_tokens)."""
    fenced = _FENCE.search(text)
    if fenced:
        return fenced.group(1)
    kept: list[str] = []
    for line in (prefix + text).splitlines():
        if kept and line.strip() and not line[0].isspace():
            break
        kept.append(line)
    return "\n".join(kept).rstrip() + "\n"


@dataclass(frozen=True, slots=True)
class SandboxResult:
    """What happened to code run in the sandbox."""

    passed: bool
    returncode: int | None
    timed_out: bool
    output: str


_GUARD = textwrap.dedent(
    """
    import os, sys
    ROOT = os.path.realpath(os.getcwd())
    _WRITE = ("w", "a", "x", "+")
    _BLOCKED = {"socket.connect", "socket.bind", "socket.__new__", "subprocess.Popen",
                "os.system", "os.exec", "os.posix_spawn", "os.fork", "os.forkpty",
                "os.kill", "os.killpg", "ctypes.dlopen", "sys.addaudithook"}
    _FS = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.symlink", "os.link",
           "os.chmod", "os.chown", "os.truncate", "shutil.rmtree", "os.utime"}

    def _inside(path):
        try:
            real = os.path.realpath(os.fsdecode(path))
        except Exception:
            return False
        return real == ROOT or real.startswith(ROOT + os.sep)

    def _hook(event, args):
        if event in _BLOCKED:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            mode = args[1] if len(args) > 1 and isinstance(args[1], str) else "r"
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            writes = any(c in mode for c in _WRITE) or flags & (os.O_WRONLY | os.O_RDWR)
            if writes and not _inside(args[0]):
                raise PermissionError(f"sandbox: writing {args[0]!r} outside the sandbox")
        if event in _FS and args and not all(
            _inside(a) for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))
        ):
            raise PermissionError(f"sandbox: {event} outside the sandbox")

    sys.addaudithook(_hook)
    del _hook
    exec(compile(open("candidate.py").read(), "candidate.py", "exec"), {"__name__": "candidate"})
    """
)


def _limits(cpu_s: int, memory_mb: int) -> None:  # runs in the child before exec
    os.setsid()
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (10 << 20, 10 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_sandboxed(
    code: str, tests: str, *, timeout_s: float = 5.0, memory_mb: int = 512
) -> SandboxResult:
    """Run ``code`` then ``tests`` (asserts) in a sandboxed child Python.

    Contained: wall and CPU timeouts (the whole process group is killed), address
    space and file size limits, a fresh temporary directory as the working directory
    and the only writable place, an empty environment, and an audit hook that refuses
    sockets, subprocesses, signals and file changes outside that directory.
    """
    workdir = Path(tempfile.mkdtemp(prefix="perfgate-sandbox-"))
    try:
        (workdir / "candidate.py").write_text(code + "\n\n" + tests + "\n", encoding="utf-8")
        (workdir / "guard.py").write_text(_GUARD, encoding="utf-8")
        cpu = max(1, int(timeout_s))
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "guard.py"],
            cwd=workdir,
            env={"PATH": "/usr/bin:/bin"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: _limits(cpu, memory_mb),
        )
        try:
            out, _ = proc.communicate(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        text = out.decode(errors="replace")[-4000:]
        code_rc = proc.returncode
        return SandboxResult(
            passed=not timed_out and code_rc == 0,
            returncode=code_rc,
            timed_out=timed_out or code_rc == -signal.SIGXCPU,
            output=text,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


REASONING_FIELDS = ("reasoning", "reasoning_content")


def message_reasoning(message: dict[str, object]) -> str:
    """Reasoning text of a non-streamed chat message, in whichever field the engine uses."""
    for name in REASONING_FIELDS:
        value = message.get(name)
        if isinstance(value, str) and value.strip():
            return value
    return ""


def reasoning_problems(reasoning: str, content: str) -> list[str]:
    """What is wrong with a reasoning model's answer (empty list when fine)."""
    problems = []
    if not reasoning.strip():
        problems.append("no reasoning text (checked fields: reasoning, reasoning_content)")
    if not content.strip():
        problems.append("no content after the reasoning")
    if reasoning.strip() and reasoning.strip() == content.strip():
        problems.append("reasoning and content are the same text (parser not separating)")
    if "</think>" in content or "<think>" in content:
        problems.append("think tags leaked into the content (reasoning parser off?)")
    return problems
