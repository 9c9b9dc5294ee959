"""AI-Parrot human channel for the hitl-telegram service.

    from hitl_telegram_channel import make_confirmation_guard

    guard = await make_confirmation_guard("http://127.0.0.1:8080", token, route="ops")
    tool_manager.set_confirmation_guard(guard)

AI-Parrot's configuration layer must be importable first (``env/<ENV>/.env`` and
``etc/config.ini`` under ``SITE_ROOT``), as for any use of ``parrot``.
"""

from .call import ToolCall
from .channel import HitlTelegramChannel, Target
from .guard import (
    DEFAULT_CHANNEL_NAME,
    HitlConfirmationGuard,
    HitlInteractionManager,
    OperatorWindowStore,
    close_confirmation_guard,
    make_confirmation_guard,
    wire,
)
from .sse import SseEvent, SseParser

__all__ = [
    "DEFAULT_CHANNEL_NAME",
    "HitlConfirmationGuard",
    "HitlInteractionManager",
    "HitlTelegramChannel",
    "OperatorWindowStore",
    "SseEvent",
    "SseParser",
    "Target",
    "ToolCall",
    "close_confirmation_guard",
    "make_confirmation_guard",
    "wire",
]
__version__ = "0.1.0"
