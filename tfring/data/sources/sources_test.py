"""Sources say their own image shapes (the writer asks them)."""

import numpy as np

from tfring.data.sources import open_source


def test_an_image_folder_reports_each_images_shape(tmp_path):
    from PIL import Image

    (tmp_path / "cat").mkdir()
    Image.fromarray(np.zeros((9, 7, 3), np.uint8)).save(tmp_path / "cat" / "a.png")
    Image.fromarray(np.zeros((5, 4), np.uint8)).save(tmp_path / "cat" / "b.png")
    source = open_source(str(tmp_path))
    assert [source.image_shape(source.example(i)) for i in range(2)] == [(9, 7, 3), (5, 4, 1)]


def test_arrays_have_no_image_shapes(tmp_path):
    np.savez(tmp_path / "a.npz", height=np.arange(3), width=np.arange(3), channels=np.arange(3))
    source = open_source(str(tmp_path / "a.npz"))
    assert source.image_shape(source.example(0)) is None


def test_a_users_own_image_source_reports_its_shapes():
    from tfring.data.meta import FeatureSpec
    from tfring.data.sources import Source

    class Mine(Source):
        features = [FeatureSpec("image", "uint8", [], "image"), FeatureSpec("height", "int64", [], "int")]

        def __len__(self):
            return 1

        def example(self, index):
            return {"image": b"", "height": 6, "width": 5, "channels": 3}

    source = Mine()
    assert source.image_shape(source.example(0)) == (6, 5, 3)
