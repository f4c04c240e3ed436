"""Communication layer: every collective goes through :class:`Communicator`,
which counts the bytes it moves per kind and per phase (see accounting.py)."""

from gnntrain.comm.accounting import CommLedger, Phase
from gnntrain.comm.communicator import Communicator

__all__ = ["CommLedger", "Communicator", "Phase"]
