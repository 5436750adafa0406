"""A folder of encoded images with one subfolder per class: `root/<class>/<file>.jpg|png`.

Images are stored encoded, as they are on disk (not decoded), with their height, width and
channels; the label is the index of the class folder in sorted order.
"""

import io
import os

from tfring.data.meta import FeatureSpec
from tfring.data.sources.base import BadItem
from tfring.data.sources.base import Source
from tfring.data.sources.base import require

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
_CHANNELS = {"1": 1, "L": 1, "LA": 2, "P": 3, "RGB": 3, "RGBA": 4, "CMYK": 4, "YCbCr": 3, "I": 1, "I;16": 1}


class ImageFolder(Source):
    """Images under `root/<class>/`, labelled by class.

    Args:
        root: the folder.
    """

    def __init__(self, root):
        self._image = require("PIL.Image", "Pillow", "image folders")
        classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        self.files = []
        for label, name in enumerate(classes):
            folder = os.path.join(root, name)
            for f in sorted(os.listdir(folder)):
                if f.lower().endswith(IMAGE_SUFFIXES):
                    self.files.append((os.path.join(folder, f), label))
        if not self.files:
            raise ValueError(f"{root} holds no class subfolders with {'/'.join(IMAGE_SUFFIXES)} images")
        self.classes = classes
        self.label = "label"
        self.features = [FeatureSpec("image", "uint8", [], "image"), FeatureSpec("height", "int64", [], "int"),
                         FeatureSpec("width", "int64", [], "int"), FeatureSpec("channels", "int64", [], "int"),
                         FeatureSpec("label", "int64", [], "int")]
        self.description = {"format": "images", "path": os.path.abspath(root), "classes": len(classes)}

    def __len__(self):
        return len(self.files)

    def item_name(self, index):
        return self.files[index][0]

    def example(self, index):
        path, label = self.files[index]
        try:
            with open(path, "rb") as f:
                data = f.read()
            with self._image.open(io.BytesIO(data)) as im:
                if im.format not in ("JPEG", "PNG"):
                    raise ValueError(f"a {im.format} image (JPEG and PNG are stored)")
                width, height = im.size
                channels = _CHANNELS.get(im.mode, len(im.getbands()))
                im.verify()  # reads the whole file: a truncated or corrupt image fails here
        except (OSError, ValueError, SyntaxError) as e:
            raise BadItem(path, f"unreadable image ({e})") from None
        return {"image": data, "height": height, "width": width, "channels": channels, "label": label}
