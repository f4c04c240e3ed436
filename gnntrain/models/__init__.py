from gnntrain.models.gnn import GNN, GlobalDropout, ModelSpec, build_model
from gnntrain.models.kernels import SparseAdjacency
from gnntrain.models.norm import edge_weights, edge_weight_values, source_scale, transposed

__all__ = ["GNN", "GlobalDropout", "ModelSpec", "SparseAdjacency", "build_model", "edge_weight_values", "edge_weights",
           "source_scale", "transposed"]
