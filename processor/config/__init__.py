"""Configuration: one frozen, validated settings object from ``PROCESSOR_*`` variables.

- ``settings``: the model (:class:`Settings`), its defaults, units and cross-setting checks;
- ``environment``: :func:`load_settings`, which the commands call (the one place, with the Spark
  sources' entry point, that reads the environment), and the check for unknown variables;
- ``parsing``: values that are more than a number (retention overrides, sizes and durations);
- ``variables``: the prefixes and the variables read that are no settings.

Everything but the commands receives a ``Settings``.
"""

from __future__ import annotations

from processor.config.environment import known_variables, load_settings, unknown_variables
from processor.config.parsing import RETENTION_KINDS, parse_overrides
from processor.config.settings import Settings
from processor.config.variables import ENV_PREFIX, FOREIGN_VARIABLES, OTHER_VARIABLES, TARGET_PREFIX

__all__ = [
    "ENV_PREFIX",
    "FOREIGN_VARIABLES",
    "OTHER_VARIABLES",
    "RETENTION_KINDS",
    "TARGET_PREFIX",
    "Settings",
    "known_variables",
    "load_settings",
    "parse_overrides",
    "unknown_variables",
]
