"""tfring.strategy (see the issues that build it)."""
