"""``GNNTRAIN_PROFILE_DIR``: each rank's training runs under cProfile, one stats file per rank
(gnntrain.launch.rank.profiled), so a mode's epoch can be read beside single's function by
function."""

from __future__ import annotations

import pstats


def test_each_rank_writes_a_profile_of_its_training(train, tmp_path, monkeypatch):
    folder = tmp_path / "profiles"
    monkeypatch.setenv("GNNTRAIN_PROFILE_DIR", str(folder))
    train(["dataset=csbm", "dataset.num_nodes=300", "mode=single", "train.epochs=2"])
    stats = pstats.Stats(str(folder / "rank0.prof"))
    epochs = [f for f in stats.stats if f[2] == "train_epoch"]
    assert epochs and sum(stats.stats[f][1] for f in epochs) == 2  # called once per epoch


def test_without_the_variable_no_profile_is_written(train, tmp_path, monkeypatch):
    monkeypatch.delenv("GNNTRAIN_PROFILE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    train(["dataset=csbm", "dataset.num_nodes=300", "mode=single", "train.epochs=1"])
    assert not list(tmp_path.rglob("*.prof"))
