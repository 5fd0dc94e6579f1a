"""Launchers: each returns a ``Backend`` handle (base_url, logs, alive, wait_ready, stop)."""

from perfgate.launch.attach import AttachedBackend
from perfgate.launch.base import Backend
from perfgate.launch.hardware import describe_local_hardware, hardware_key
from perfgate.launch.process import ProcessBackend, free_port, launch_process

__all__ = [
    "AttachedBackend",
    "Backend",
    "ProcessBackend",
    "describe_local_hardware",
    "free_port",
    "hardware_key",
    "launch_process",
]
