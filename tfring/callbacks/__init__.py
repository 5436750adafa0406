"""tfring.callbacks (see the issues that build it)."""
