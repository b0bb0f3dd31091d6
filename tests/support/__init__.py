"""Test support: fault injection, the format version 1 writer, helpers only tests use."""
