"""tfring.optimizers (see the issues that build it)."""
