"""tfring.data (see the issues that build it)."""
