"""The terms of a grant question: what a person approves, sent as data.

The service stores a grant only from a *grant question*: an approval asked with its
terms (``scope``, ``owner_id``, ``window_seconds``) as a ``grant`` object beside the
question. It shows those terms to the person on lines of its own, under 🔑, never cut,
and their yes stores the grant on exactly those terms, from the tap. Nothing written in a
question's words becomes a grant on the service.

AI-Parrot 1.2.4's ``GrantGuard`` writes its terms into its question only
(``Scope: …``/``Owner: …``/``Approval window: 15.0 min``). :func:`grant_guard_terms`
recognises that question, whole and word for word, so that
:class:`~hitl_telegram_channel.channel.HitlTelegramChannel` asks it as a grant question
with the terms it states; any other approval is asked as it is and grants nothing.
``GrantGuard`` shows its window in tenths of a minute, and the person approves what they
are shown: :func:`shown_window` is that window in seconds, the one
:class:`~hitl_telegram_channel.grants.HitlGrantStore` presents afterwards.

Standard library only: importing it never imports ``parrot``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Optional

#: AI-Parrot 1.2.4's ``GrantGuard._request_approval`` question, exactly.
_GRANT_GUARD_QUESTION = re.compile(
    r"⚠️ Tool '[^\n]*' requires approval\.\n"
    r"Scope: (?P<scope>[^\n]+)\n"
    r"Owner: (?P<owner>[^\n]+)\n"
    r"Approval window: (?P<minutes>\d+\.\d) min\n"
    r"\n"
    r"Do you approve this action\?"
)


@dataclass(frozen=True)
class GrantTerms:
    """A grant question's terms: ``scope`` (``tool:deploy``, ``tool:*``) for
    ``owner_id``, for ``window_seconds`` from the person's yes (the route's
    ``max_grant_seconds`` may cut it when asked)."""

    scope: str
    owner_id: str
    window_seconds: int

    def body(self) -> Dict[str, Any]:
        """The ``grant`` object of the interaction sent to ``POST /v1/interactions``."""
        return {
            "scope": self.scope,
            "owner_id": self.owner_id,
            "window_seconds": self.window_seconds,
        }


def shown_window(window_seconds: int) -> int:
    """The window ``GrantGuard`` shows a person for ``window_seconds``, in seconds.

    It writes ``f"{window_seconds / 60:.1f} min"``: 900 s is "15.0 min" (900 s), 100 s
    is "1.7 min" (102 s). The grant lasts what the person read; at least one second.
    """
    return _seconds_of(f"{window_seconds / 60:.1f}")


def _seconds_of(minutes: str) -> int:
    return max(1, round(float(minutes) * 60))


def grant_guard_terms(interaction: Any) -> Optional[GrantTerms]:
    """The terms of ``interaction`` when it is ``GrantGuard``'s approval question (its
    type ``approval`` and its question exactly as ai-parrot 1.2.4 words it), else
    ``None``."""
    kind = getattr(interaction, "interaction_type", None)
    kind = getattr(kind, "value", kind)
    if kind != "approval":
        return None
    question = getattr(interaction, "question", None)
    if not isinstance(question, str):
        return None
    m = _GRANT_GUARD_QUESTION.fullmatch(question)
    if m is None:
        return None
    return GrantTerms(
        scope=m.group("scope"),
        owner_id=m.group("owner"),
        window_seconds=_seconds_of(m.group("minutes")),
    )
