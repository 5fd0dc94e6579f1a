"""What hardware a server runs on: the host that serves it and the GPUs given to it.

A *probe* is a small POSIX shell script (``PROBE_SCRIPT``) run where the server runs:
locally, on the ssh host, or inside the container. It prints the first block of
``/proc/cpuinfo``, ``nproc`` (which honours cpusets and CPU affinity), ``uname -m``,
``CUDA_VISIBLE_DEVICES`` as that shell sees it, and ``nvidia-smi --query-gpu=index,uuid,name
--format=csv,noheader``, each under a marker line. ``describe_probe`` parses that text on
this machine, wherever it came from: parsing never does I/O, and the launchers only run the
script. Only busybox applets are needed (``sh``, ``cat``, ``nproc``, ``uname``); a missing
``nvidia-smi`` means no GPUs.

The description is a flat dict::

    key                   hardware_key(): "2x-nvidia-rtx-a6000", "cpu-2x-amd-epyc-avx512"
    source                "local", "local (attached)", "ssh:<host>", "container:<id>"
    cpu, cpus, isa, machine
    gpu_names, gpu_uuids  the GPUs the server may use (after CUDA_VISIBLE_DEVICES)
    gpus                  their count
    gpus_on_host          how many nvidia-smi lists before CUDA_VISIBLE_DEVICES
    cuda_visible_devices  its value, or None when unset
    gpu_probe             "ok", "absent" (no nvidia-smi), or "failed (exit N): <first line>"
    host_id               host_id(): a hash of the machine id and boot id (one boot of one
                          machine), or "" where neither could be read

The host id tells "the same host" from "another host of the same key" when a run is gated
(perfgate.gate.policy): it is a truncated SHA-256, so it names no machine. Virtual machines cloned
from one image share a machine id, so the boot id is part of it: a reboot counts as another
host, which is the cautious side (the spread between hosts is then added).

When the probe could not run, the description is ``{"key": "", "source": ..., "error": ...}``
(see ``unknown_hardware``): the caller decides what key to use instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import re
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

MARK = "==perfgate-hw:"

# Every command's stderr goes to /dev/null except nvidia-smi's (its failure message is kept).
# OMP_* are unset for nproc: GNU nproc honours them, but they are a thread setting, not
# hardware. `tool` runs a command, or the busybox applet of that name where only busybox is.
# The standard directories go after the server's PATH: CUDA needs no nvidia-smi on PATH, so
# a GPU the driver shows counts even where the server's PATH lacks the tool.
PROBE_SCRIPT = r"""
PATH="${PATH:+$PATH:}/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"; export PATH
have() { command -v "$1" >/dev/null 2>&1; }
tool() { if have "$1"; then "$@"; elif have busybox; then busybox "$@"; else return 127; fi; }
mark() { printf '\n==perfgate-hw:%s==\n' "$1"; }
mark cpuinfo
tool sed '/^[[:space:]]*$/q' /proc/cpuinfo 2>/dev/null || cat /proc/cpuinfo 2>/dev/null
mark nproc
(unset OMP_NUM_THREADS OMP_THREAD_LIMIT; tool nproc) 2>/dev/null
mark machine
tool uname -m 2>/dev/null
mark cuda-visible-devices
if [ "${CUDA_VISIBLE_DEVICES+set}" = set ]; then
  printf 'set:%s\n' "$CUDA_VISIBLE_DEVICES"
else
  echo unset
fi
mark nvidia-smi
if have nvidia-smi; then
  query='--query-gpu=index,uuid,name'
  if have timeout && timeout 5 true 2>/dev/null; then  # not old busybox's -t syntax
    timeout 20 nvidia-smi "$query" --format=csv,noheader 2>&1
  else
    nvidia-smi "$query" --format=csv,noheader 2>&1
  fi
  rc=$?
else
  echo absent
  rc=0
fi
mark nvidia-smi-exit
echo "$rc"
mark host
cat /etc/machine-id 2>/dev/null || cat /var/lib/dbus/machine-id 2>/dev/null
cat /proc/sys/kernel/random/boot_id 2>/dev/null
mark end
"""

PROBE_TIMEOUT_S = 60


@dataclass(frozen=True)
class Gpu:
    """One row of ``nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader``."""

    index: int
    uuid: str
    name: str


_GPU_ROW = re.compile(r"^\s*(\d+)\s*,\s*([^,\s]+)\s*,\s*(.+?)\s*$")


def parse_sections(text: str) -> dict[str, str]:
    """The probe's output split at its marker lines: section name → text."""
    sections: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(MARK) and stripped.endswith("=="):
            if name is not None:
                sections[name] = "\n".join(lines).strip("\n")
            name, lines = stripped[len(MARK) : -2], []
        elif name is not None:
            lines.append(line)
    if name is not None:
        sections[name] = "\n".join(lines).strip("\n")
    return sections


def parse_cpuinfo(text: str) -> tuple[str, set[str]]:
    """The CPU model name and the first CPU's flags from ``/proc/cpuinfo`` text."""
    model = ""
    flags: set[str] | None = None
    for line in text.splitlines():
        field, _, value = line.partition(":")
        field = field.strip()
        if field == "model name" and not model:
            model = value.strip()
        elif field == "flags" and flags is None:
            flags = set(value.split())
    return model or "unknown", flags or set()


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """GPUs from ``--query-gpu=index,uuid,name --format=csv,noheader``; other lines (error
    messages) are ignored."""
    gpus = []
    for line in text.splitlines():
        if match := _GPU_ROW.match(line):
            gpus.append(Gpu(int(match[1]), match[2], match[3]))
    return gpus


def _device_for(entry: str, gpus: list[Gpu]) -> Gpu | None:
    if entry.isdigit():
        return next((g for g in gpus if g.index == int(entry)), None)
    if not entry.lower().startswith("gpu-"):
        return None  # "-1", "NoDevFiles", MIG-... instances: not a whole GPU we can name
    found = [g for g in gpus if g.uuid.lower().startswith(entry.lower())]
    return found[0] if len(found) == 1 else None  # an ambiguous prefix is invalid


def visible_gpus(gpus: list[Gpu], cuda_visible_devices: str | None) -> list[Gpu]:
    """The GPUs a CUDA program sees under ``CUDA_VISIBLE_DEVICES`` (None: unset, all).

    Entries are indices (nvidia-smi's, which are CUDA's under CUDA_DEVICE_ORDER=PCI_BUS_ID)
    or UUIDs, whole or as a unique prefix such as ``GPU-8932f937``. As in CUDA, the first
    entry that names no device ends the list: "" and "-1" and "NoDevFiles" give no GPU,
    "0,2,-1,1" gives 0 and 2. A device named twice counts once.
    """
    if cuda_visible_devices is None:
        return list(gpus)
    chosen: list[Gpu] = []
    for entry in cuda_visible_devices.split(","):
        device = _device_for(entry.strip(), gpus)
        if device is None:
            break
        if device not in chosen:
            chosen.append(device)
    return chosen


def cpu_isa(flags: set[str]) -> str:
    """The widest SIMD level llama.cpp-style kernels would use: avx512, avx2, or ''."""
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if "avx2" in flags else ""


def hardware_key(hardware: Mapping[str, object]) -> str:
    """A short file-name-safe key: ``2x-nvidia-rtx-a6000`` or ``cpu-2x-amd-epyc-avx512``."""
    gpus = hardware.get("gpu_names") or []
    count: object  # a GPU count, or the probed CPU count as given
    if isinstance(gpus, list) and gpus:
        name, count = str(gpus[0]), len(gpus)
        prefix = ""
    else:
        name, count = str(hardware.get("cpu", "unknown")), hardware.get("cpus", 0)
        name += f" {hardware.get('isa', '')}"  # the same CPU name can hide different SIMD
        prefix = "cpu-"
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return f"{prefix}{count}x-{slug}"


def unknown_hardware(source: str, error: str, **extra: object) -> dict[str, object]:
    """The description of hardware that could not be probed: an empty key."""
    return {"key": "", "source": source, "error": error, **extra}


def _gpu_probe(sections: dict[str, str]) -> tuple[str, list[Gpu]]:
    text = sections.get("nvidia-smi", "")
    if text.strip() == "absent":
        return "absent", []
    code = sections.get("nvidia-smi-exit", "").strip()
    if code != "0":
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        return f"failed (exit {code or '?'}): {first[:200]}", []
    return "ok", parse_nvidia_smi(text)


def host_id(text: str) -> str:
    """A stable, non-identifying id of one boot of one machine from the probe's ``host``
    section (machine id, boot id): 16 hex digits of SHA-256, or "" when it is empty."""
    ids = " ".join(text.split())
    if not ids:
        return ""
    return hashlib.sha256(f"perfgate-host:{ids}".encode()).hexdigest()[:16]


def describe_probe(text: str, source: str) -> dict[str, object]:
    """The hardware description from a probe's output (``PROBE_SCRIPT``), wherever it ran."""
    sections = parse_sections(text)
    missing = [s for s in ("cpuinfo", "nproc", "end") if s not in sections]
    if missing:
        head = text.strip()[:300] or "(no output)"
        return unknown_hardware(source, f"the hardware probe did not finish: {head}")
    model, flags = parse_cpuinfo(sections["cpuinfo"])
    nproc = sections["nproc"].strip()
    visible = sections.get("cuda-visible-devices", "unset")
    cvd = visible[len("set:") :] if visible.startswith("set:") else None
    gpu_probe, on_host = _gpu_probe(sections)
    gpus = visible_gpus(on_host, cvd)
    desc: dict[str, object] = {
        "source": source,
        "cpu": model,
        "cpus": int(nproc) if nproc.isdigit() else 0,
        "isa": cpu_isa(flags),
        "machine": sections.get("machine", "").strip(),
        "gpu_names": [g.name for g in gpus],
        "gpu_uuids": [g.uuid for g in gpus],
        "gpus": len(gpus),
        "gpus_on_host": len(on_host),
        "cuda_visible_devices": cvd,
        "gpu_probe": gpu_probe,
        "host_id": host_id(sections.get("host", "")),
    }
    desc["key"] = hardware_key(desc)
    return desc


def probe_local(env: Mapping[str, str] | None = None) -> str:
    """Run the probe on this machine with ``env`` (default: this process's environment)."""
    done = subprocess.run(
        ["/bin/sh", "-c", PROBE_SCRIPT],
        env=dict(os.environ if env is None else env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
        check=False,
    )
    return done.stdout


def describe_local_hardware(
    env: Mapping[str, str] | None = None, *, source: str = "local"
) -> dict[str, object]:
    """CPU and GPUs of this machine, as a process started with ``env`` (default: this
    process's environment) would be given them: its ``CUDA_VISIBLE_DEVICES`` and the
    ``nvidia-smi`` on its ``PATH`` count."""
    try:
        text = probe_local(env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return unknown_hardware(source, f"the hardware probe could not run: {exc}")
    return describe_probe(text, source)


LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


def _is_local_address(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback or ip.is_unspecified:
        return True
    # the kernel routes a packet to one of this machine's own addresses from that address:
    # a UDP connect (which sends nothing) reveals the source address it would choose
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.connect((str(ip), 9))
        return bool(ipaddress.ip_address(sock.getsockname()[0].split("%", 1)[0]) == ip)
    return False


def is_this_machine(host: str) -> bool:
    """Whether ``host`` (a name or an address, as in a URL) is this machine: localhost,
    a loopback or unspecified address, this machine's host name, or an address of one of
    its interfaces. A name is resolved; one that does not resolve is not this machine."""
    host = host.strip().strip("[]").lower().rstrip(".")
    if not host:
        return False
    if host in LOCAL_NAMES or host.endswith(".localhost"):
        return True
    try:
        return _is_local_address(host)
    except ValueError:
        pass  # a name, not an address
    if host == socket.gethostname().lower():
        return True
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return False
    addresses = {str(info[4][0]) for info in infos}
    return bool(addresses) and all(_is_local_address(a) for a in addresses)


@dataclass(frozen=True)
class FreeMemory:
    """How much of one memory is free: the host's RAM, or one GPU's."""

    device: str  # "host memory", "GPU 0 (NVIDIA H100 80GB HBM3)"
    free_mib: float
    total_mib: float

    def describe(self) -> str:
        return f"{self.device}: {self.free_mib / 1024:.1f} of {self.total_mib / 1024:.1f} GiB free"


def parse_meminfo(text: str) -> FreeMemory | None:
    """The host's free memory from ``/proc/meminfo`` (MemAvailable: what new processes can
    have without swapping)."""
    fields = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if value.strip().endswith("kB"):
            fields[name.strip()] = float(value.split()[0]) / 1024
    if "MemAvailable" not in fields or "MemTotal" not in fields:
        return None
    return FreeMemory("host memory", fields["MemAvailable"], fields["MemTotal"])


def parse_gpu_memory(text: str) -> list[FreeMemory]:
    """GPUs' free memory from ``nvidia-smi --query-gpu=index,name,memory.free,memory.total
    --format=csv,noheader,nounits`` (MiB); other lines are ignored."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4 and parts[0].isdigit():
            try:
                free, total = float(parts[2]), float(parts[3])
            except ValueError:
                continue
            out.append(FreeMemory(f"GPU {parts[0]} ({parts[1]})", free, total))
    return out


def free_memory_here() -> list[FreeMemory]:
    """This host's free memory and each GPU's (where nvidia-smi answers)."""
    out = []
    with contextlib.suppress(OSError), open("/proc/meminfo", encoding="utf-8") as f:
        if (host := parse_meminfo(f.read())) is not None:
            out.append(host)
    query = "--query-gpu=index,name,memory.free,memory.total"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader,nounits"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
        out += parse_gpu_memory(done.stdout)
    return out


def nearly_full(memories: list[FreeMemory], floor: float = 0.05) -> list[FreeMemory]:
    """The memories with less than ``floor`` of their total free."""
    return [m for m in memories if m.total_mib > 0 and m.free_mib < floor * m.total_mib]
