from gnntrain.models.gnn import GNN, GlobalDropout, ModelSpec, build_model
from gnntrain.models.kernels import SparseAdjacency
from gnntrain.models.norm import edge_weights

__all__ = ["GNN", "GlobalDropout", "ModelSpec", "SparseAdjacency", "build_model", "edge_weights"]
