"""gnntrain: train graph neural networks on graphs too large for one device."""

import os as _os

# OGB checks PyPI for a newer version of itself on import; never reach the network for that.
_os.environ.setdefault("OUTDATED_IGNORE", "1")
# DGL's backend is PyTorch; naming it spares every rank DGL's "backend not selected" notice.
_os.environ.setdefault("DGLBACKEND", "pytorch")

# Transparent huge pages for CPU tensors of 2 MiB and more (PyTorch's c10 allocator reads this once,
# at its first allocation, so it is set before torch is imported: the CLI, spawned ranks and
# torchrun/srun ranks all import gnntrain first). Each epoch allocates its activations, SpMM outputs
# and gradients anew; with 4 KiB pages the kernel zero-fills them page by page on first touch, which
# on the kernels benchmark graph cost about as much as the SpMM itself. Live memory is unchanged.
# Opt out with THP_MEM_ALLOC_ENABLE=0; a no-op where the kernel has THP off.
_os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

__version__ = "0.1.0"
