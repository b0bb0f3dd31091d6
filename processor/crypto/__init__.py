"""Encryption at rest: per-segment data keys, their wrapping by key providers, sealed blocks."""
