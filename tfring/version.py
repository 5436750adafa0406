"""tfring's version: written here and nowhere else (setup.py reads this file as text)."""

__version__ = "0.4.0.dev0"
