"""gnntrain: train graph neural networks on graphs too large for one device."""

__version__ = "0.1.0"
