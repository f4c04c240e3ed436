from gnntrain.models.gnn import GNN, GINLayer, GlobalDropout, ModelSpec, build_model, hidden_activation, run_layers
from gnntrain.models.kernels import SparseAdjacency
from gnntrain.models.norm import edge_weight_values, edge_weights, source_scale, transposed

__all__ = ["GNN", "GINLayer", "GlobalDropout", "ModelSpec", "SparseAdjacency", "build_model", "hidden_activation",
           "run_layers",
           "edge_weight_values", "edge_weights",
           "source_scale", "transposed"]
