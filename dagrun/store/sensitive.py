"""Which values are secrets, and how a secret is hidden: one rule for the logs and the page.

A variable holds a secret when its key contains one of ``SENSITIVE_WORDS``; so does a field
of a connection's ``extra`` whose key does (at any depth); a connection's password always is
one. Where a secret is shown it becomes ``REPLACEMENT``, and every known secret of at least
``MIN_LENGTH`` characters is replaced wherever it appears in text (``secrets_pattern``).

A leaf, so that the store (which selects the secrets), the runtime's masking (which hides
them in logs) and the web page (which hides them on its pages) share one rule without
importing each other.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

#: A variable whose key contains one of these (in any case) holds a secret.
SENSITIVE_WORDS = ("password", "secret", "token", "api_key", "private_key")
#: What a secret is shown as.
REPLACEMENT = "***"
#: Shorter secrets are never replaced in text: ``***`` for every ``ab`` would make logs
#: unreadable, and would show where the secret's letters are.
MIN_LENGTH = 4


def is_sensitive(key: str) -> bool:
    """Whether a variable's value (or an extra field's) is a secret, judged by its key."""
    lowered = key.lower()
    return any(word in lowered for word in SENSITIVE_WORDS)


def extra_secrets(extra: Any) -> Iterator[str]:
    """The values of a connection's ``extra`` held under sensitive keys, at any depth (a
    number or a list under such a key counts too, as text)."""
    if isinstance(extra, dict):
        for key, value in extra.items():
            if is_sensitive(str(key)):
                yield from _leaves(value)
            else:
                yield from extra_secrets(value)
    elif isinstance(extra, list):
        for item in extra:
            yield from extra_secrets(item)


def _leaves(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


def masked_extra(extra: Any) -> Any:
    """A connection's ``extra`` with the value of every sensitive key replaced."""
    if isinstance(extra, dict):
        return {
            key: REPLACEMENT if is_sensitive(str(key)) else masked_extra(value)
            for key, value in extra.items()
        }
    if isinstance(extra, list):
        return [masked_extra(item) for item in extra]
    return extra


def maskable(secrets: Iterable[str]) -> frozenset[str]:
    """The secrets that are replaced in text: those of ``MIN_LENGTH`` characters or more."""
    return frozenset(s for s in secrets if isinstance(s, str) and len(s) >= MIN_LENGTH)


def longest_first(secrets: Iterable[str]) -> list[str]:
    """Secrets in the order they are looked for, so one that contains another is hidden whole."""
    return sorted(secrets, key=len, reverse=True)


def secrets_pattern(secrets: Iterable[str]) -> re.Pattern[str] | None:
    """One pattern that finds every maskable secret in text; None when there is none."""
    kept = maskable(secrets)
    if not kept:
        return None
    return re.compile("|".join(map(re.escape, longest_first(kept))))


class Hider:
    """Replaces the given secrets wherever they appear in text, as a log masks them: what
    the web page shows of values the store holds."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self._pattern = secrets_pattern(secrets)

    def __call__(self, text: str) -> str:
        return text if self._pattern is None else self._pattern.sub(REPLACEMENT, text)

    def in_json(self, value: Any) -> Any:
        """A decoded JSON ``value`` with the secrets in its strings (keys too) replaced."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {self(str(k)): self.in_json(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.in_json(v) for v in value]
        return value
