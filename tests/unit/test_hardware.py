"""Hardware keys and the hardware probe: GPUs by name and count (after CUDA_VISIBLE_DEVICES),
CPUs by name, count and SIMD level; parsed from a probe's text wherever the probe ran.

Provenance of the texts: tests/data/hardware/README.md. The nvidia-smi texts below are
written from nvidia-smi's documented CSV format, not captured (no GPU machine was at hand);
the UUIDs are made up."""

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.engines import OpenAICompatible
from perfgate.launch import AttachedBackend, ProcessBackend, free_port
from perfgate.launch.hardware import (
    PROBE_SCRIPT,
    Gpu,
    cpu_isa,
    describe_local_hardware,
    describe_probe,
    hardware_key,
    is_this_machine,
    parse_cpuinfo,
    parse_nvidia_smi,
    parse_sections,
    visible_gpus,
)
from tests.helpers import FAKE_GPUS, fake_nvidia_smi

DATA = Path(__file__).parents[1] / "data" / "hardware"

# Written from documentation: `nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader`
# prints one "index, uuid, name" line per GPU, in PCI bus order.
UUIDS = [
    "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6",
    "GPU-1b3a7c44-09e2-5a6d-8f1e-3c2d4b5a6978",
    "GPU-1b9e0d21-77aa-4c3e-9b10-5e6f7a8b9c0d",
    "GPU-f00dcafe-1234-5678-9abc-def012345678",
]
FOUR_A6000 = "".join(f"{i}, {u}, NVIDIA RTX A6000\n" for i, u in enumerate(UUIDS))
MIXED = FAKE_GPUS  # an H100 (index 0) and an A100 (index 1)
EIGHT_H200 = "".join(
    f"{i}, GPU-{i:08x}-0000-4000-8000-00000000c0de, NVIDIA H200\n" for i in range(8)
)
# nvidia-smi's documented failure when the driver is not loaded (exit code 9)
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)


def probe_text(cpuinfo: str, *, nproc="8", cvd=None, smi="absent", rc=0, machine="x86_64"):
    """A probe's output in PROBE_SCRIPT's layout (the layout of the captured file)."""
    visible = "unset" if cvd is None else f"set:{cvd}"
    parts = [
        ("cpuinfo", cpuinfo),
        ("nproc", nproc),
        ("machine", machine),
        ("cuda-visible-devices", visible),
        ("nvidia-smi", smi),
        ("nvidia-smi-exit", str(rc)),
        ("end", ""),
    ]
    return "".join(f"\n==perfgate-hw:{name}==\n{body}\n" for name, body in parts)


def read(name):
    return (DATA / name).read_text()


# -- keys ---------------------------------------------------------------------------------
def test_gpu_key_wins_over_cpu():
    hw = {"gpu_names": ["NVIDIA RTX A6000", "NVIDIA RTX A6000"], "cpu": "AMD EPYC", "cpus": 64}
    assert hardware_key(hw) == "2x-nvidia-rtx-a6000"
    assert hardware_key({"gpu_names": ["NVIDIA H200"], "cpu": "x"}) == "1x-nvidia-h200"


def test_cpu_key_includes_simd_level():
    assert hardware_key({"gpu_names": [], "cpu": "AMD EPYC", "cpus": 2, "isa": "avx512"}) == (
        "cpu-2x-amd-epyc-avx512"
    )
    assert hardware_key({"cpu": "Intel(R) Xeon(R) CPU @ 2.20GHz", "cpus": 8, "isa": "avx2"}) == (
        "cpu-8x-intel-r-xeon-r-cpu-2-20ghz-avx2"
    )
    assert cpu_isa({"sse4_2", "avx2", "avx512f"}) == "avx512"
    assert cpu_isa({"sse4_2"}) == ""


# -- cpuinfo ------------------------------------------------------------------------------
def test_cpuinfo_of_amd_and_intel_cpus():
    model, flags = parse_cpuinfo(read("cpuinfo-amd-epyc-7763.txt"))
    assert model == "AMD EPYC 7763 64-Core Processor"
    assert cpu_isa(flags) == "avx2" and "avx512f" not in flags

    model, flags = parse_cpuinfo(read("cpuinfo-intel-xeon-platinum-8480.txt"))
    assert model == "Intel(R) Xeon(R) Platinum 8480+"
    assert cpu_isa(flags) == "avx512" and "amx_tile" in flags

    # two blocks: the first CPU's flags are taken, not the (shorter) second's
    model, flags = parse_cpuinfo(read("cpuinfo-intel-xeon-e5-2686-v4.txt"))
    assert model == "Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz"
    assert cpu_isa(flags) == "avx2" and "rdseed" in flags

    assert parse_cpuinfo("") == ("unknown", set())


def test_captured_probe_of_this_ci_machine():
    desc = describe_probe(read("probe-amd-epyc-2cpu-no-gpu.txt"), "local")
    assert desc["key"] == "cpu-2x-amd-epyc-avx512"
    assert desc["cpu"] == "AMD EPYC" and desc["cpus"] == 2 and desc["machine"] == "x86_64"
    assert desc["gpus"] == 0 and desc["gpu_probe"] == "absent"
    assert desc["cuda_visible_devices"] is None and desc["source"] == "local"


def test_cpu_keys_from_probes_written_from_documentation():
    amd = describe_probe(probe_text(read("cpuinfo-amd-epyc-7763.txt"), nproc="16"), "ssh:h")
    assert amd["key"] == "cpu-16x-amd-epyc-7763-64-core-processor-avx2"
    intel = describe_probe(probe_text(read("cpuinfo-intel-xeon-platinum-8480.txt")), "local")
    assert intel["key"] == "cpu-8x-intel-r-xeon-r-platinum-8480-avx512"


# -- nvidia-smi and CUDA_VISIBLE_DEVICES --------------------------------------------------
def test_nvidia_smi_rows():
    gpus = parse_nvidia_smi(MIXED)
    assert gpus == [
        Gpu(0, "GPU-aa11e2c0-5b6d-4e7f-8a9b-0c1d2e3f4a5b", "NVIDIA H100 80GB HBM3"),
        Gpu(1, "GPU-bb22f3d1-6c7e-4f80-9b0c-1d2e3f4a5b6c", "NVIDIA A100-SXM4-80GB"),
    ]
    assert len(parse_nvidia_smi(EIGHT_H200)) == 8
    assert parse_nvidia_smi(NO_DRIVER) == []


@pytest.mark.parametrize(
    ("cvd", "indices"),
    [
        (None, [0, 1, 2, 3]),  # unset: all
        ("", []),  # set but empty: none
        ("-1", []),
        ("NoDevFiles", []),
        ("2", [2]),
        ("3,1", [3, 1]),  # CUDA's order is the variable's order
        (" 1 , 2 ", [1, 2]),
        ("0,2,-1,1", [0, 2]),  # the first invalid entry ends the list (CUDA's rule)
        ("7", []),  # no such index
        ("1,1", [1]),
        (UUIDS[2], [2]),  # a whole UUID
        ("GPU-8932f937", [0]),  # a unique prefix
        ("gpu-f00dcafe,0", [3, 0]),
        ("GPU-1b", []),  # an ambiguous prefix (GPU-1b3a..., GPU-1b9e...) is invalid
        ("MIG-5e6f7a8b-0000-0000-0000-000000000000", []),  # a MIG slice is not a whole GPU
    ],
)
def test_cuda_visible_devices_filters_the_list(cvd, indices):
    gpus = parse_nvidia_smi(FOUR_A6000)
    assert [g.index for g in visible_gpus(gpus, cvd)] == indices


def test_gpu_keys_from_probes():
    cpu = read("cpuinfo-amd-epyc-7763.txt")

    def key(smi, cvd=None):
        return describe_probe(probe_text(cpu, smi=smi, cvd=cvd), "ssh:gpu-host")["key"]

    assert key(FOUR_A6000) == "4x-nvidia-rtx-a6000"
    assert key(FOUR_A6000, "0,1") == "2x-nvidia-rtx-a6000"
    assert key(FOUR_A6000, UUIDS[3]) == "1x-nvidia-rtx-a6000"
    assert key(FOUR_A6000, "GPU-8932,GPU-f00d") == "2x-nvidia-rtx-a6000"
    assert key(FOUR_A6000, "") == "cpu-8x-amd-epyc-7763-64-core-processor-avx2"
    assert key(EIGHT_H200) == "8x-nvidia-h200"
    assert key(EIGHT_H200, "4,5,6,7") == "4x-nvidia-h200"
    assert key(MIXED, "1") == "1x-nvidia-a100-sxm4-80gb"
    assert key(MIXED) == "2x-nvidia-h100-80gb-hbm3"  # a mixed host is keyed by its first

    desc = describe_probe(probe_text(cpu, smi=EIGHT_H200, cvd="GPU-00000003"), "ssh:gpu-host")
    assert desc["gpu_names"] == ["NVIDIA H200"] and desc["gpus"] == 1
    assert desc["gpu_uuids"] == ["GPU-00000003-0000-4000-8000-00000000c0de"]
    assert desc["gpus_on_host"] == 8 and desc["cuda_visible_devices"] == "GPU-00000003"
    assert desc["gpu_probe"] == "ok" and desc["source"] == "ssh:gpu-host"


def test_a_failed_nvidia_smi_is_no_gpu_and_says_why():
    desc = describe_probe(probe_text(read("cpuinfo-amd-epyc-7763.txt"), smi=NO_DRIVER, rc=9), "x")
    assert desc["gpus"] == 0 and desc["key"].startswith("cpu-")
    assert str(desc["gpu_probe"]).startswith("failed (exit 9): NVIDIA-SMI has failed")


def test_an_unfinished_probe_has_no_key():
    cut = probe_text(read("cpuinfo-amd-epyc-7763.txt")).split("==perfgate-hw:nvidia-smi==")[0]
    desc = describe_probe(cut, "ssh:h")
    assert desc["key"] == "" and desc["source"] == "ssh:h" and "did not finish" in desc["error"]
    assert describe_probe("", "container:abc")["key"] == ""


def test_sections_tolerate_stray_lines():
    text = "motd line\n" + probe_text("model name\t: X\nflags\t: avx2", smi="absent") + "bye\n"
    sections = parse_sections(text)
    assert sections["cpuinfo"] == "model name\t: X\nflags\t: avx2"
    assert describe_probe(text, "local")["key"] == "cpu-8x-x-avx2"


# -- this machine, checked against independent facts ---------------------------------------
def first_model_name():
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def test_local_description_matches_independent_facts():
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    desc = describe_local_hardware(env)
    cpus = len(os.sched_getaffinity(0))
    assert desc["cpus"] == cpus
    nproc = subprocess.run(["nproc"], capture_output=True, text=True, check=True, env=env)
    assert desc["cpus"] == int(nproc.stdout)
    assert desc["cpu"] == first_model_name()
    assert desc["machine"] == platform.machine()
    assert desc["source"] == "local"
    if shutil.which("nvidia-smi") is None:
        assert desc["gpus"] == 0 and desc["gpu_probe"] == "absent"
        if first_model_name() == "AMD EPYC" and "avx512f" in read_flags():
            assert desc["key"] == f"cpu-{cpus}x-amd-epyc-avx512"  # the CI machine
    else:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
        assert desc["gpus"] == sum(line.startswith("GPU ") for line in listed.splitlines())


def read_flags():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def test_omp_settings_are_not_hardware():
    env = {**os.environ, "OMP_NUM_THREADS": "97", "OMP_THREAD_LIMIT": "97"}
    assert describe_local_hardware(env)["cpus"] == len(os.sched_getaffinity(0))


def test_an_unusable_path_still_probes():
    desc = describe_local_hardware({"PATH": "/nonexistent"})
    assert desc["cpus"] == len(os.sched_getaffinity(0)) and desc["cpu"] == first_model_name()


# -- a fake nvidia-smi on the server's PATH: the server's environment counts ---------------
def test_process_backend_probes_with_the_servers_environment(tmp_path):
    counter = tmp_path / "runs"
    fake = fake_nvidia_smi(tmp_path / "bin", counter=counter)
    server_env = {"PATH": f"{fake.parent}:{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": "1"}
    backend = ProcessBackend(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        engine=OpenAICompatible(),
        model="m",
        host="127.0.0.1",
        port=free_port(),
        log_path=tmp_path / "s.log",
        env=server_env,
    )
    try:
        hw = backend.hardware()
        hw["label"] = "changed by the caller"
        again = backend.hardware()
    finally:
        backend.stop()
    assert hw["key"] == "1x-nvidia-a100-sxm4-80gb"
    assert hw["gpu_names"] == ["NVIDIA A100-SXM4-80GB"] and hw["gpus_on_host"] == 2
    assert hw["source"] == "local" and hw["cuda_visible_devices"] == "1"
    assert counter.read_text().splitlines() == ["run"]  # probed once
    assert "label" not in again and again["key"] == hw["key"]
    # without the server's environment this machine shows no such GPU
    assert "NVIDIA A100-SXM4-80GB" not in describe_local_hardware()["gpu_names"]


def test_script_runs_under_busybox_sh_alone(tmp_path):
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("busybox is not installed: run scripts/install-podman.sh")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sh").symlink_to(busybox)
    fake_nvidia_smi(bindir)
    done = subprocess.run(
        [str(bindir / "sh"), "-c", PROBE_SCRIPT],
        env={"PATH": str(bindir), "CUDA_VISIBLE_DEVICES": "GPU-bb22"},
        capture_output=True,
        text=True,
        check=True,
    )
    desc = describe_probe(done.stdout, "busybox")
    assert desc["key"] == "1x-nvidia-a100-sxm4-80gb"
    assert desc["cpus"] == len(os.sched_getaffinity(0)) and desc["cpu"] == first_model_name()


# -- attached servers: local or not --------------------------------------------------------
def interface_addresses():
    """This machine's addresses as `ip` lists them (an independent source)."""
    if shutil.which("ip") is None:
        return []
    out = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
    return [
        line.split()[3].split("/")[0]
        for line in out.splitlines()
        if " scope global " in line  # link-local ones need a scope id
    ]


def test_which_hosts_are_this_machine():
    import socket

    local = ["localhost", "127.0.0.1", "127.3.4.5", "::1", "0.0.0.0", "::", "a.localhost"]
    for host in [*local, socket.gethostname(), *interface_addresses()]:
        assert is_this_machine(host), host
    ours = set(interface_addresses())
    for host in ["198.51.100.7", "2001:db8::7", "gpu-box.invalid", ""]:
        if host not in ours:
            assert not is_this_machine(host), host


def test_attached_backend_describes_this_machine_or_says_remote():
    engine = OpenAICompatible()
    here = AttachedBackend("http://127.0.0.1:8000", engine=engine, model="m")
    hw = here.hardware()
    assert hw["source"] == "local (attached)"
    assert hw["key"] == describe_local_hardware()["key"] != ""
    far = AttachedBackend("http://198.51.100.7:8000/", engine=engine, model="m")
    assert far.hardware() == {"key": "", "source": "remote", "host": "198.51.100.7"}
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    v6 = AttachedBackend("http://[::1]:8000", engine=engine, model="m", env=env)
    assert v6.hardware()["cuda_visible_devices"] == ""


def test_host_id_names_one_boot_of_one_machine_without_naming_it():
    from perfgate.launch.hardware import describe_local_hardware, host_id

    machine = Path("/etc/machine-id").read_text().strip()
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    here = describe_local_hardware()["host_id"]
    assert here == host_id(f"{machine}\n{boot}\n") == describe_local_hardware()["host_id"]
    assert len(here) == 16 and machine not in here and boot[:8] not in here
    assert host_id(f"{machine}\nanother-boot") != here  # a reboot (or a clone) is another host
    assert (
        host_id("") == ""
        and describe_probe(read("probe-amd-epyc-2cpu-no-gpu.txt"), "l")["host_id"] == ""
    )  # a probe without the section (an older capture) names no host


# /proc/meminfo's head, captured on this 24 GiB CI host (2026-12-05)
MEMINFO = """MemTotal:       24683792 kB
MemFree:        23372392 kB
MemAvailable:   23953092 kB
Buffers:          103604 kB
"""


def test_free_memory_reads_meminfo_and_nvidia_smi_and_names_what_is_nearly_full():
    from perfgate.launch.hardware import nearly_full, parse_gpu_memory, parse_meminfo

    host = parse_meminfo(MEMINFO)
    assert host is not None and round(host.free_mib) == 23392 and round(host.total_mib) == 24105
    assert host.describe() == "host memory: 22.8 of 23.5 GiB free"
    assert parse_meminfo("MemTotal: 1 kB\n") is None  # a kernel without MemAvailable: unknown
    # written from nvidia-smi's documented CSV (noheader, nounits: MiB), not a capture
    gpus = parse_gpu_memory(
        "0, NVIDIA H100 80GB HBM3, 2010, 81559\n1, NVIDIA H100 80GB HBM3, 70000, 81559\n"
        "No devices were found\n"
    )
    assert [g.device for g in gpus] == [
        "GPU 0 (NVIDIA H100 80GB HBM3)",
        "GPU 1 (NVIDIA H100 80GB HBM3)",
    ]
    assert nearly_full([host, *gpus]) == [gpus[0]]  # 2.5% free: under the 5% floor
