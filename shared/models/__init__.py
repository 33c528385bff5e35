"""Model-client implementations."""
