"""GCN with the random-walk normalisation: h' = D^-1 (A+I) h W + b.

Kipf & Welling (Semi-Supervised Classification with Graph Convolutional Networks, §2) use the
symmetric D^-1/2 (A+I) D^-1/2; the row-normalised D^-1 (A+I) is the variant beside it. The layer is
GCN's own (one weight matrix and a bias, either order); only the family differs: its ``mean``
normalisation (1/in-degree, self-loops from ``model.self_loop``). One module plus
``configs/model/gcn_rw.yaml``: the modes ask the family what they need.
"""

from __future__ import annotations

from gnntrain.models.gcn import GCNLayer
from gnntrain.models.registry import ModelFamily, register_model

register_model(
    ModelFamily(
        name="gcn_rw",
        layer=GCNLayer,
        normalization="mean",
        linear=True,
        description="h' = D^-1 (A+I) h W + b",
    )
)
