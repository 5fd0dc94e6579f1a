"""Hardware keys: GPUs by name and count, CPUs by name, count and SIMD level."""

from perfgate.launch.hardware import cpu_isa, describe_local_hardware, hardware_key


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


def test_local_description_has_a_key():
    desc = describe_local_hardware()
    assert desc["key"] == hardware_key(desc) and desc["cpus"] >= 1
