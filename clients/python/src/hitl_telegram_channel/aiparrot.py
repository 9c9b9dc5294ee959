"""The AI-Parrot side of the package: the ``HumanChannel``, the manager and the guard.

    from hitl_telegram_channel.aiparrot import make_confirmation_guard, HitlGrantStore
    from hitl_telegram_channel.aiparrot import report_outcomes

It needs the ``aiparrot`` extra (``pip install "hitl-telegram-channel[aiparrot]"``:
ai-parrot 1.2.4 and aiohttp) and, as any import of ``parrot`` does, navconfig's project
scaffold: ``env/<ENV>/.env`` (``ENV`` defaults to ``dev``) under ``SITE_ROOT``. Importing this module is what loads AI-Parrot; the package itself
(:class:`~hitl_telegram_channel.client.HitlClient`, ``verify_webhook``) never does.
"""

from .channel import HitlTelegramChannel, Target
from .grants import HitlGrantStore
from .outcomes import outcome_of, report_outcomes, summarize_result
from .guard import (
    DEFAULT_CHANNEL_NAME,
    HitlConfirmationDecision,
    HitlConfirmationGuard,
    HitlInteractionManager,
    OperatorWindowStore,
    close_confirmation_guard,
    make_confirmation_guard,
    wire,
)

__all__ = [
    "DEFAULT_CHANNEL_NAME",
    "HitlConfirmationDecision",
    "HitlConfirmationGuard",
    "HitlGrantStore",
    "HitlInteractionManager",
    "HitlTelegramChannel",
    "OperatorWindowStore",
    "Target",
    "close_confirmation_guard",
    "make_confirmation_guard",
    "outcome_of",
    "report_outcomes",
    "summarize_result",
    "wire",
]
