"""Shared machinery of the GPU backends (no vendor binding is imported here)."""
