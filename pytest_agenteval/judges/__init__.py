"""judges."""
