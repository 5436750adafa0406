"""Keras saves into tfring's in-memory files exactly as into the user's path, and nothing reaches a disk."""

import keras
import numpy as np
import pytest

from tfring.strategy.keras_wraps import save_sinks


@pytest.fixture(scope="module")
def model():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile(optimizer="adam", loss="mse")
    model.fit(np.ones((8, 4)), np.ones((8, 3)), verbose=0)
    return model


def _same(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a.get_weights(), b.get_weights()))


@pytest.mark.parametrize("method,name", [("save_weights", "m.weights.h5"), ("save", "m.keras"), ("save", "m.h5")])
def test_what_rank_0_keeps_loads_back(model, tmp_path, method, name):
    target = save_sinks.for_save(method, str(tmp_path / name), keep=True)
    getattr(model, method)(target)
    with save_sinks.contents(target) as data:
        (tmp_path / name).write_bytes(data)
    save_sinks.release(target)
    if method == "save_weights":
        loaded = keras.models.clone_model(model)
        loaded.load_weights(tmp_path / name)
    else:
        loaded = keras.models.load_model(tmp_path / name, compile=False)
    assert _same(loaded, model)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_discarded_archive_keeps_nothing(model, tmp_path):
    target = save_sinks.for_save("save", str(tmp_path / "m.keras"), keep=False)
    assert isinstance(target, save_sinks.DiscardedFile)
    model.save(target)
    assert target.tell() > 0 and not list(tmp_path.iterdir())


def test_keras_refusals_name_the_users_path(model, tmp_path):
    with pytest.raises(ValueError, match=f"Received: filepath={tmp_path}/m.h5"):
        model.save_weights(save_sinks.for_save("save_weights", f"{tmp_path}/m.h5", keep=False))
    with pytest.raises(ValueError, match="Invalid filepath extension"):
        model.save(save_sinks.for_save("save", f"{tmp_path}/m.pt", keep=False))
    with pytest.raises(ValueError, match=f"should not end in `.keras`. Received: filepath={tmp_path}/m.keras"):
        save_sinks.for_save("save", f"{tmp_path}/m.keras", keep=True, zipped=False)


def test_a_folder_save_unpacks_to_keras_layout(model, tmp_path):
    target = save_sinks.for_save("save", str(tmp_path / "folder"), keep=True, zipped=False)
    model.save(target, zipped=False)
    save_sinks.write_folder(target, str(tmp_path / "folder"))
    assert sorted(p.name for p in (tmp_path / "folder").iterdir()) == [
        "assets", "config.json", "metadata.json", "model.weights.h5"]
    assert _same(keras.models.load_model(tmp_path / "folder", compile=False), model)
