"""The source interface and the error for an unreadable item."""

import importlib


class BadItem(ValueError):
    """One item (a file, a row) of the source cannot be read; `skip_bad` skips these."""

    def __init__(self, item, reason):
        super().__init__(f"{item}: {reason}")
        self.item = item
        self.reason = reason


class Source:
    """Random access to the examples of a dataset being converted (see the package docstring)."""

    features = ()
    label = None
    classes = None
    description = {}

    def __len__(self):
        raise NotImplementedError

    def item_name(self, index):
        return f"example {index}"

    def example(self, index):
        raise NotImplementedError

    def image_shape(self, values):
        """The (height, width, channels) of the encoded image among an example's values.

        The writer records the shapes in the meta file, from which readers learn whether images
        can be batched as they are or need resizing.

        Args:
            values: what `example(i)` returned.

        Returns:
            A tuple of ints, or None for a source without encoded images. Any source with an
            image-encoded feature whose examples carry `height`, `width` and `channels` (as
            ImageFolder's do, or a user's own Source) reports them.
        """
        has_image = any(getattr(f, "encoding", None) == "image" for f in self.features)
        if not has_image or not all(k in values for k in ("height", "width", "channels")):
            return None
        return (int(values["height"]), int(values["width"]), int(values["channels"]))


def require(module, package, what):
    """Imports an optional reader, or says which package to install.

    Args:
        module: the module to import ("PIL.Image").
        package: its pip name ("Pillow").
        what: what needs it ("image folders").

    Returns:
        The module.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{what} need {package}: pip install {package}") from e
