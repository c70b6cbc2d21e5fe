"""The simulator's own error (kept apart so the control-folder tools import no numpy)."""


class SimulationError(RuntimeError):
    """The simulator cannot do what was asked (a test or setup problem, not a modelled fault)."""
