"""The Python API in a Jupyter notebook, executed headless by nbclient (issue 57): it trains from
a PyG ``Data`` on one rank and on two, and what the notebook shows carries no terminal escape
codes (a Jupyter kernel sets FORCE_COLOR=1, and ranks started from it used to inherit it: the
summary table arrived as ``[1m [0m│``)."""

from __future__ import annotations

import json
import os

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ESCAPE = "\x1b"

BUILD_DATA = """
import torch
from torch_geometric.data import Data

g = torch.Generator().manual_seed(0)
n = 200
edge_index = torch.randint(0, n, (2, 1500), generator=g)
y = torch.randint(0, 3, (n,), generator=g)
y[:10] = -1  # unlabeled
data = Data(x=torch.randn(n, 8, generator=g), edge_index=edge_index, y=y)
"""

TRAIN = """
import gnntrain.api as gt

result = gt.train(data, [{overrides}], run_dir={run_dir!r})
print("STATUS", result.status, result.summary["world_size"])
"""


def _shown(output) -> str:
    """What a notebook front end renders of one output: a stream's text, or a rich display's
    HTML where it has one (its plain-text fallback otherwise)."""
    if output["output_type"] == "stream":
        return output["text"]
    data = output.get("data", {})
    return data.get("text/html", data.get("text/plain", ""))


def test_a_notebook_trains_from_a_pyg_data_and_shows_no_escape_codes(cache_dir, tmp_path):
    common = ["train.epochs=3", "kernel=torch", f"cache_dir={cache_dir}"]
    cells = [BUILD_DATA]
    for name, mode in (("one", ["mode=single"]), ("two", ["mode=partition"])):
        overrides = ", ".join(repr(o) for o in mode + ["hardware.ranks_per_node=2"] + common)
        cells.append(TRAIN.format(overrides=overrides, run_dir=str(tmp_path / name)))
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    os.environ.setdefault("GNNTRAIN_OFFLINE", "1")
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3")
    client.execute(cwd=str(tmp_path))

    for index, world in ((1, 1), (2, 2)):
        outputs = notebook.cells[index]["outputs"]
        shown = "".join(_shown(o) for o in outputs)
        assert f"STATUS completed {world}" in shown, json.dumps(outputs)[-3000:]
        assert "final loss" in shown, shown[-2000:]  # the summary table reached the notebook
        assert ESCAPE not in shown, repr(shown[:800])
        summary = json.loads((tmp_path / ("one", "two")[index - 1] / "summary.json").read_text())
        assert summary["status"] == "completed"
