"""Hosting code fpgaserve did not write: model instances in processes of their own.

Any backend's instances can run in instance processes (config parameter ``instance_process``,
or the backend's ``instance_process_by_default``): a crash of the code they run (a model's
``model.py``, an operator's compiled C-simulation) then fails its batch instead of the server.
This package is the one interface for it, used by the engine (which hosts a backend class:
``hosted``), by backends (which may bring their own parent side, a ``ProcessBackend``
subclass, and child side) and by the entry points of every server process:

========================  ======================================================================
``instance_process.py``   the parent side: ``ProcessBackend``, a ``Backend`` that starts, feeds,
                          restarts and stops one child per instance; ``hosted(cls)``
``instance_worker.py``    the child side: the program the child runs (``CHILD_PROGRAM`` starts
                          it), and ``current()``, its worker, through
                          which hosted code calls into the server (BLS) and logs
``instance_channel.py``   what both sides share: the message channel and the tensor segments
``plain_values.py``       the format of a child's messages: plain values, bounded (no pickle)
``instance_messages.py``  what a child may send, held to each kind's shape before it is acted on
``log_forwarding.py``     a hosted backend's ``logging`` records, sent to the server's log
``custom_metrics.py``     metrics that hosted model code defines, as /metrics shows them
``helper_groups.py``      helper programs (compilers) started in sessions of their own, ended
                          by the process that started them when it ends or gives up its loads
``process_memory.py``     glibc's memory settings for a process that allocates per batch
``address_space.py``      what a process may still map under an address-space limit
                          (RLIMIT_AS), and what loads set aside for their batches
``startup.py``            ``start_process``: what every fpgaserve process does first
========================  ======================================================================

Backends import this package (these names), never its modules.
"""

from .address_space import (
    AddressSpaceReservation,
    address_space_limit,
    describe_address_space,
    format_bytes,
    mapped_bytes,
    out_of_memory,
    reserve_address_space,
    set_aside_bytes,
)
from .custom_metrics import families as custom_metric_families
from .helper_groups import helper_group, kill_helper_groups, stopped_by_us
from .instance_channel import register_shared, unregister_shared
from .instance_process import (
    ChildDied,
    ProcessBackend,
    abandon_loads,
    failure_from_child,
    hosted,
    instance_restart_counts,
    restart_families,
)
from .instance_worker import CallFailed, current, ignore_stop_signals, stop_signals_blocked
from .log_forwarding import forward_logs
from .startup import start_process

__all__ = [
    "AddressSpaceReservation",
    "CallFailed",
    "ChildDied",
    "ProcessBackend",
    "abandon_loads",
    "address_space_limit",
    "current",
    "custom_metric_families",
    "describe_address_space",
    "failure_from_child",
    "format_bytes",
    "forward_logs",
    "helper_group",
    "hosted",
    "ignore_stop_signals",
    "instance_restart_counts",
    "kill_helper_groups",
    "mapped_bytes",
    "out_of_memory",
    "register_shared",
    "reserve_address_space",
    "restart_families",
    "set_aside_bytes",
    "start_process",
    "stop_signals_blocked",
    "stopped_by_us",
    "unregister_shared",
]
