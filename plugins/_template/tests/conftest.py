"""Opt in to miocore's test kit: fixtures, the gpu marker and the contract suite."""

pytest_plugins = ["miocore.testing"]
