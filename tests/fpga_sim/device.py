"""Former name of the PYNQ plug-in (``fpga_sim.pynq_device``), kept as an alias."""

from .card import ENV_CARDS, ENV_CONTROL_DIR, ENV_PLATFORM, ENV_RENDEZVOUS, ENV_RENDEZVOUS_TIMEOUT, RENDEZVOUS_FILE
from .errors import SimulationError
from .kernels import ENV_KERNEL_DELAY_MS, find_project_dir
from .pynq_device import (
    PROBE_PRIORITY,
    SimulatedAlveoDevice,
    SimulatedMemory,
    arm_rendezvous,
    concurrency,
    disarm_rendezvous,
    reset_pynq_devices,
    simulated_cards,
)

__all__ = [
    "ENV_CARDS",
    "ENV_CONTROL_DIR",
    "ENV_KERNEL_DELAY_MS",
    "ENV_PLATFORM",
    "ENV_RENDEZVOUS",
    "ENV_RENDEZVOUS_TIMEOUT",
    "PROBE_PRIORITY",
    "RENDEZVOUS_FILE",
    "SimulatedAlveoDevice",
    "SimulatedMemory",
    "SimulationError",
    "arm_rendezvous",
    "concurrency",
    "disarm_rendezvous",
    "find_project_dir",
    "reset_pynq_devices",
    "simulated_cards",
]
