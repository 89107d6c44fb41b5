"""Which variables hold secrets: those whose key contains one of ``SENSITIVE_WORDS``.

A leaf, so that the store (which selects those variables' values for masking) and the
runtime's masking (which hides them in logs) share one rule without importing each other.
"""

from __future__ import annotations

#: A variable whose key contains one of these (in any case) holds a secret.
SENSITIVE_WORDS = ("password", "secret", "token", "api_key", "private_key")


def is_sensitive(key: str) -> bool:
    """Whether a variable's value is a secret, judged by its key."""
    lowered = key.lower()
    return any(word in lowered for word in SENSITIVE_WORDS)
