"""Typed reading of Spark's option strings: case-insensitive names, and getters whose errors name
the option, the problem and the fix."""

from __future__ import annotations

import re
from collections.abc import Mapping

from rocketmq_spark.config.errors import ConfigurationError

# Durations as Spark writes them: a number and a unit (none: milliseconds).
_DURATION = re.compile(r"^\s*(\d+)\s*(us|ms|s|sec|m|min|h|d)?\s*$", re.IGNORECASE)
_DURATION_MS = {
    "us": 0.001,
    "ms": 1,
    None: 1,
    "s": 1000,
    "sec": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}


class OptionReader:
    """Case-insensitive access to the raw option strings, with typed getters that explain errors."""

    def __init__(self, raw: Mapping[str, str], names: tuple[str, ...], ignored: frozenset[str], *, owner: str) -> None:
        """``names``: the options as documented; ``ignored``: keys (lower case) accepted and dropped;
        ``owner``: whose options they are, as the error about an unknown one says (the source, a sink)."""
        canonical = {name.lower(): name for name in names}
        self.values: dict[str, str] = {}
        unknown = []
        for key, value in raw.items():
            name = canonical.get(key.lower())
            if name is None:
                if key.lower() not in ignored:
                    unknown.append(key)
                continue
            self.values[name] = str(value)
        if unknown:
            raise ConfigurationError(
                ", ".join(sorted(unknown)),
                f"not an option of {owner}",
                f"Check the spelling; the options are: {', '.join(names)}",
            )

    def get(self, name: str) -> str | None:
        value = self.values.get(name)
        return value.strip() if value is not None and value.strip() else None

    def required(self, name: str, fix: str) -> str:
        value = self.get(name)
        if value is None:
            raise ConfigurationError(name, "is required", fix)
        return value

    def choice(self, name: str, allowed: tuple[str, ...], default: str, *, also: tuple[str, ...] = ()) -> str:
        """One of ``allowed``, any case; the error names ``also`` too (kinds of value, such as JSON
        offsets, that the caller told apart before)."""
        value = self.get(name)
        if value is None:
            return default
        for option in allowed:
            if value.upper() == option.upper():
                return option
        raise ConfigurationError(name, f"unknown value '{value}'", f"Use one of: {', '.join(allowed + also)}")

    def boolean(self, name: str, default: bool) -> bool:
        value = self.get(name)
        if value is None:
            return default
        if value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigurationError(name, f"unknown value '{value}'", "Use one of: true, false")

    def positive_int(self, name: str, default: int | None = None, *, zero_ok: bool = False) -> int | None:
        value = self.get(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            number = -1
        if number < 0 or (number == 0 and not zero_ok):
            kind, least = (
                ("whole number of 0 or more", "0 or more") if zero_ok else ("positive whole number", "above 0")
            )
            raise ConfigurationError(name, f"'{value}' is not a {kind}", f"Give a number {least}")
        return number

    def epoch_ms(self, name: str) -> int | None:
        value = self.get(name)
        if value is None:
            return None
        if not value.isdigit():
            raise ConfigurationError(
                name,
                f"'{value}' is not a time in epoch milliseconds",
                "Give milliseconds since 1970-01-01T00:00:00Z, e.g. 1700000000000",
            )
        return int(value)

    def duration_ms(self, name: str, default: int) -> int:
        value = self.get(name)
        if value is None:
            return default
        match = _DURATION.match(value)
        if match is None:
            raise ConfigurationError(
                name,
                f"'{value}' is not a duration",
                "Write it as Spark does: a number with a unit, e.g. 500ms, 30s, 15m, 1h",
            )
        unit = match.group(2).lower() if match.group(2) else None
        return int(int(match.group(1)) * _DURATION_MS[unit])
