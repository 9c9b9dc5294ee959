"""Checks that a webhook delivery came from the service (standard library only).

The service signs every attempt: ``X-Hitl-Signature: sha256=<hex>``, the lowercase hex
HMAC-SHA256, keyed with the agent's webhook secret, of
``"<X-Hitl-Timestamp>.<X-Hitl-Delivery>.<raw body>"`` (``src/outbox.rs`` ``sign``,
"Webhooks" in the service's docs/http-api.md). :func:`verify_webhook` is that recipe,
stricter where a loose reading would let a forgery through: the timestamp must be plain
digits and the delivery id exactly ``wh_`` and 32 lowercase hex digits. A dot in the id
would let the three parts shift (id ``wh_a.b`` with body ``c`` signs the same bytes as
id ``wh_a`` with body ``b.c``), so a captured delivery could be replayed under a new id
with a changed body.

A valid signature is not the whole defence against replays: the receiver must still
drop a delivery id it has already seen (keep seen ids at least ``tolerance`` seconds),
since delivery is at-least-once and a recent capture is within the tolerance.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from typing import Any, Optional, Union

SIGNATURE_HEADER = "X-Hitl-Signature"
TIMESTAMP_HEADER = "X-Hitl-Timestamp"
DELIVERY_HEADER = "X-Hitl-Delivery"

_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_DELIVERY_ID = re.compile(r"wh_[0-9a-f]{32}")
_SIGNATURE = re.compile(r"sha256=[0-9a-f]{64}")


def verify_webhook(
    secret: Union[bytes, str],
    headers: Any,
    body: bytes,
    tolerance: float = 300,
    *,
    now: Optional[float] = None,
) -> bool:
    """Whether ``body`` with ``headers`` is a delivery the service signed with ``secret``
    within ``tolerance`` seconds of ``now`` (default: the current time).

    Args:
        secret: The agent's webhook secret (the variable its ``webhook_secret_env``
            names); a ``str`` is taken as UTF-8.
        headers: The request's headers: any mapping (``dict``, ``http.server``'s
            ``self.headers``, a framework's header object), names and values ``str``
            or ``bytes``; names match in any case.
        body: The raw body bytes exactly as received (not re-serialised JSON).
        tolerance: The largest difference, in seconds, between the signing time and
            ``now`` that is accepted, either way (clock skew).

    Returns ``False`` for a missing or malformed header, a wrong signature or a stale
    timestamp; never raises for anything the sender controls.
    """
    if isinstance(secret, str):
        secret = secret.encode("utf-8")
    if not isinstance(body, (bytes, bytearray, memoryview)):
        # A str would have to be re-encoded, and any change of bytes breaks the HMAC:
        # insist on what was received.
        raise TypeError("body must be the raw request bytes")
    if not secret:
        raise ValueError("the webhook secret is empty")
    timestamp = _header(headers, TIMESTAMP_HEADER)
    delivery = _header(headers, DELIVERY_HEADER)
    signature = _header(headers, SIGNATURE_HEADER)
    if timestamp is None or delivery is None or signature is None:
        return False
    if not (
        _TIMESTAMP.fullmatch(timestamp)
        and _DELIVERY_ID.fullmatch(delivery)
        and _SIGNATURE.fullmatch(signature)
    ):
        return False
    signed = timestamp.encode() + b"." + delivery.encode() + b"." + bytes(body)
    expected = "sha256=" + hmac.new(secret, signed, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(signature, expected):
        return False
    current = time.time() if now is None else now
    return abs(current - int(timestamp)) <= tolerance


def _header(headers: Any, name: str) -> Optional[str]:
    """``name``'s value in ``headers``, matched without regard to case; ``None`` when it
    is absent or given more than once (two values: which one was signed is unclear)."""
    getter = getattr(headers, "get_all", None)  # email.message.Message (http.server)
    if callable(getter):
        values = getter(name) or []
    else:
        lowered = name.lower()
        values = [v for k, v in headers.items() if _name(k) == lowered]
    if len(values) != 1:
        return None
    value = values[0]
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return None
    if not isinstance(value, str):
        return None
    return value.strip()


def _name(key: Any) -> Optional[str]:
    """A header name in lower case; bytes names (ASGI's) too."""
    if isinstance(key, bytes):
        key = key.decode("latin-1")
    return key.lower() if isinstance(key, str) else None
