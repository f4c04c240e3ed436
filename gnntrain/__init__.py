"""gnntrain: train graph neural networks on graphs too large for one device."""
import os as _os

# OGB checks PyPI for a newer version of itself on import; never reach the network for that.
_os.environ.setdefault("OUTDATED_IGNORE", "1")

__version__ = "0.1.0"
