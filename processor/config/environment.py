"""Settings from the environment: :func:`load_settings` is what the commands call (the one place that
reads ``PROCESSOR_*`` variables, with the Spark sources' entry point). A bad value raises
``ConfigError`` naming the variable, and so does a ``PROCESSOR_*`` variable that is no setting (a
misspelt one, with the closest name): ignoring it would leave its default in force, e.g. an
unlimited retention or an empty topic list. S3 credentials are not here: they come from the
standard AWS variables and credential chain (each cloud's own, docs/configuration.md).
"""

from __future__ import annotations

import difflib
import functools
import os
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from processor.config.settings import Settings
from processor.config.variables import ENV_PREFIX, FOREIGN_VARIABLES, OTHER_VARIABLES, TARGET_PREFIX
from processor.errors import ConfigError, InvalidNameError
from processor.kafka.security import ENV_NAMES
from processor.metadata import authentication

# A pattern that only lists values, e.g. ^(token|none)$ or ^(?i:text|json)$ (any case).
_CHOICES = re.compile(r"\^\((\?i:)?([A-Za-z0-9_-]+(?:\|[A-Za-z0-9_-]+)+)\)\$")


def _describe(error: Mapping[str, Any]) -> str:
    """One validation error in plain words, naming its variable: the allowed values of an
    enumerated setting, the description of any other pattern, never a raw regular expression."""
    loc = error.get("loc") or ()
    msg = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    if not loc and msg.startswith(ENV_PREFIX):
        return msg  # a model-level error that names its variable itself
    name = f"{ENV_PREFIX}{str(loc[0]).upper()}" if loc else "configuration"
    value = error.get("input")
    shown = "" if isinstance(value, dict) or value is None else f" (got {value!r})"
    secret = Settings.model_fields.get(str(loc[0])) if loc else None
    if secret is not None and "SecretStr" in str(secret.annotation):
        shown = ""  # a secret's value is never printed, not even a wrong one
    kind, ctx = error.get("type"), error.get("ctx") or {}
    if kind == "string_pattern_mismatch":
        choices = _CHOICES.fullmatch(str(ctx.get("pattern", "")))
        if choices:
            any_case = " (in any case)" if choices.group(1) else ""
            return f"{name} must be one of {', '.join(choices.group(2).split('|'))}{any_case}{shown}"
        field = Settings.model_fields.get(str(loc[0])) if loc else None
        if field is not None and field.description:
            return f"{name} must be {field.description}{shown}"
    elif kind in ("literal_error", "enum"):
        return f"{name} must be one of {ctx.get('expected', '(see docs/configuration.md)')}{shown}"
    elif kind == "bool_parsing":
        return f"{name} must be true or false (or 1/0, yes/no, on/off){shown}"
    return f"{name}: {msg}{shown}"


@functools.cache
def known_variables() -> frozenset[str]:
    """Every ``PROCESSOR_*`` variable something reads: the settings, the restore target's security
    settings (``PROCESSOR_TARGET_*``) and the few others (OTHER_VARIABLES)."""
    settings = {f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields}
    target = {name.replace(ENV_PREFIX, TARGET_PREFIX, 1) for name in ENV_NAMES.values()}
    target.add(f"{TARGET_PREFIX}BOOTSTRAP_SERVERS")  # the restore's target cluster
    return frozenset(settings | target | OTHER_VARIABLES)


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """A problem for each variable of the ``PROCESSOR_`` prefix (in any case) that nothing reads,
    naming the closest known variable. Such a variable is refused, not ignored: a misspelt
    retention, topic or size setting would otherwise leave its default in force unnoticed."""
    known = known_variables()
    suffixes = sorted(name.removeprefix(ENV_PREFIX) for name in known - OTHER_VARIABLES)
    problems = []
    for variable in sorted(environ):
        upper = variable.upper()
        if not upper.startswith(ENV_PREFIX) or variable in known or upper in FOREIGN_VARIABLES:
            continue
        if upper in known:
            hint = f"did you mean {upper}? (variable names are upper case)"
        else:
            close = difflib.get_close_matches(upper.removeprefix(ENV_PREFIX), suffixes, n=1, cutoff=0.6)
            hint = (
                f"did you mean {ENV_PREFIX}{close[0]}?" if close else "`processor config` lists every setting"
            )
        problems.append(f"{variable} is not a known setting; {hint}")
    return problems


def load_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Build settings from ``environ`` (default: os.environ) plus overrides; raise ConfigError
    listing every problem: each unknown ``PROCESSOR_*`` variable and each invalid value."""
    env = os.environ if environ is None else environ
    problems = unknown_variables(env)
    values: dict[str, Any] = {}
    for name in Settings.model_fields:
        raw = env.get(f"{ENV_PREFIX}{name.upper()}")
        if raw is not None:
            values[name] = raw
    values.update(overrides)
    try:
        settings = Settings.model_validate(values)
    except ValidationError as exc:
        problems += [_describe(e) for e in exc.errors()]
    except InvalidNameError as exc:
        problems.append(str(exc))
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    # every writer of this process signs and every reader screens by it (the keys are read now, so
    # a missing or empty key directory stops the command here)
    authentication.install(
        authentication.from_settings(
            settings.metadata_auth, settings.metadata_auth_keys, settings.metadata_auth_unsigned_before
        )
    )
    return settings
