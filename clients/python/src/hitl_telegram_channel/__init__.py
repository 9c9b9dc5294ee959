"""Ask a human on Telegram, through the hitl-telegram service, before a tool runs.

Any Python agent (standard library only, nothing to configure):

    from hitl_telegram_channel import HitlClient, verify_webhook

    client = HitlClient("http://127.0.0.1:8080", token)
    decision = client.create("deploy", {"service": "billing"}, owner_id="alice")
    if decision.allowed:
        ...

AI-Parrot agents (the ``aiparrot`` extra, and navconfig's ``$SITE_ROOT/env/<ENV>/.env``):

    from hitl_telegram_channel import HitlClient, OutcomeReporter
    from hitl_telegram_channel.aiparrot import HitlGrantStore, make_confirmation_guard, report_outcomes
    from parrot.auth.grants import GrantGuard

    guard = await make_confirmation_guard("http://127.0.0.1:8080", token, route="ops")
    tool_manager.set_confirmation_guard(guard)
    # After the yes: each confirmed call's outcome, reported in the background.
    report_outcomes(tool_manager, OutcomeReporter(HitlClient("http://127.0.0.1:8080", token)))
    # Grants (FEAT-211) stored by the service: durable, shared, revocable in the chat.
    store = HitlGrantStore(HitlClient("http://127.0.0.1:8080", token))
    tool_manager.set_grant_guard(GrantGuard(store, human_manager=guard.human_manager))

The AI-Parrot names are also reachable from the package itself
(``from hitl_telegram_channel import make_confirmation_guard``, as before the split),
but loaded only when first used (PEP 562), so that importing the package never imports
``parrot``: importing ``parrot`` fails outside a navconfig project.
"""

from __future__ import annotations

import importlib
from typing import Any, List

from .call import ToolCall
from .client import (
    AlreadyDecided,
    Confirmation,
    GrantAnswer,
    GrantRecord,
    HitlClient,
    HitlError,
    Outcome,
    Progress,
)
from .grant_terms import GrantTerms
from .reporter import OutcomeReporter
from .sse import SseEvent, SseParser
from .webhook import verify_webhook

#: The names :mod:`hitl_telegram_channel.aiparrot` provides, loaded on first access.
_AIPARROT_NAMES = frozenset(
    {
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
    }
)
#: What the AI-Parrot channel imports that a plain install lacks.
_EXTRA_MODULES = ("parrot", "aiohttp", "navconfig")


def __getattr__(name: str) -> Any:
    if name not in _AIPARROT_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(".aiparrot", __name__)
    except ModuleNotFoundError as e:
        missing = (e.name or "").partition(".")[0]
        if missing not in _EXTRA_MODULES:
            raise
        raise ImportError(
            f"{name} is part of the AI-Parrot channel, which needs {missing!r}: "
            'pip install "hitl-telegram-channel[aiparrot]" (HitlClient needs nothing)',
            name=e.name,
        ) from e
    return getattr(module, name)


def __dir__() -> List[str]:
    return sorted(set(globals()) | _AIPARROT_NAMES)


__all__ = [
    "AlreadyDecided",
    "Confirmation",
    "GrantAnswer",
    "GrantRecord",
    "GrantTerms",
    "HitlClient",
    "HitlError",
    "Outcome",
    "OutcomeReporter",
    "Progress",
    "SseEvent",
    "SseParser",
    "ToolCall",
    "verify_webhook",
]  # not the AI-Parrot names: `import *` must work without AI-Parrot too
__version__ = "1.0.0"  # the service's version (Cargo.toml)
