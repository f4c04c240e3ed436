"""The C heap's free memory, given back to the system between stages."""

from __future__ import annotations


def release_heap() -> None:
    """Give the C heap's free memory back to the system (glibc keeps it otherwise: after large
    blocks are freed its mmap threshold rises, and the next stage's arrays land on a heap that never
    shrinks, so a process's resident size, and its peak, carry every stage's leftovers)."""
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)
    except (OSError, AttributeError, TypeError):
        pass
