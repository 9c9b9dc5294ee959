"""AI-Parrot's ``GrantStore`` (FEAT-211) backed by the service's ``/v1/grants``.

AI-Parrot's own ``InMemoryGrantStore`` keeps grants in a dict: lost on restart, unseen
by the operators, revocable by nobody in the chat. :class:`HitlGrantStore` keeps them in
the service instead, so they survive restarts of the agent and of the service, are
shared by every process of the agent (each check reads the service, so a revoke stops a
grant at once everywhere), are audited, and are listed and revoked in Telegram
(``/grants``).

How ``GrantGuard`` uses it (ai-parrot 1.2.4): ``is_allowed(owner, scope)`` first; when
that is False it asks its own approval question on its human manager's channel and, on a
yes, calls ``grant(owner, scope, granted_by=str(result.interaction_id), ...)``. Through
:class:`~hitl_telegram_channel.channel.HitlTelegramChannel` that question is a *grant
question* on the service: the channel sends the terms ``GrantGuard`` wrote in it (scope,
owner, window) as data, the service shows them to the person under 🔑 and stores the
grant with their yes, from the tap (it is in ``/grants`` and ``GET /v1/grants`` at
once). :meth:`HitlGrantStore.grant` then presents the question's id with the same terms
(``POST /v1/grants`` with ``interaction_id``) and returns that grant; the service answers
409 when the terms differ from what the person approved, or when the question was no
grant question. A store that took ``granted_by`` on trust would let any caller mint
grants; this one cannot get a grant no person approved, nor a longer or wider one.

Fail closed: :meth:`~HitlGrantStore.is_allowed` is False whenever the service cannot say
yes (unreachable, an error, an answer it cannot read); :meth:`~HitlGrantStore.grant`
raises :class:`~hitl_telegram_channel.client.HitlError` when the service stores nothing,
which ``GrantGuard`` does not catch, so ``ToolManager.execute_tool`` raises and the tool
does not run.

The client's calls block (``urllib``); they run in a thread so the agent's event loop
goes on meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import List

from parrot.auth.grants import Grant, GrantStore

from .client import GrantRecord, HitlClient, HitlError
from .grant_terms import shown_window

logger = logging.getLogger("hitl_telegram_channel")


def to_parrot(record: GrantRecord) -> Grant:
    """The service's grant as AI-Parrot's ``Grant``.

    ``granted_by`` is the Telegram user id of the person who said yes (as a string), the
    id AI-Parrot's ``HumanResponse.respondent`` carries through this channel; who they
    are by name is in the service's record (``record.granted_by``). ``revoked`` is true
    once ``revoked_at`` is set; an expired grant stays unrevoked and inactive, as in
    AI-Parrot.
    """
    return Grant(
        grant_id=record.grant_id,
        owner_id=record.owner_id,
        scope=record.scope,
        granted_by=str(record.granted_by.get("id", "")),
        created_at=_parse(record.created_at),
        expires_at=_parse(record.expires_at),
        revoked=record.revoked_at is not None,
    )


def _parse(when: str) -> datetime:
    # The service writes RFC 3339 in UTC with a trailing Z, which fromisoformat reads
    # only from Python 3.11 on.
    return datetime.fromisoformat(when.replace("Z", "+00:00"))


class HitlGrantStore(GrantStore):
    """AI-Parrot's ``GrantStore``, stored by the hitl-telegram service as the agent
    ``client`` authenticates as.

    Grants belong to that agent: another agent's are invisible to it (the service
    answers 404), so give each AI-Parrot agent its own token.
    """

    def __init__(self, client: HitlClient) -> None:
        self.client = client

    def __repr__(self) -> str:
        return f"HitlGrantStore({self.client!r})"

    async def grant(
        self,
        owner_id: str,
        scope: str,
        *,
        granted_by: str,
        window_seconds: int,
    ) -> Grant:
        """The grant ``GrantGuard`` decided on: the one the person's yes to its
        question stored, found by presenting that question.

        ``granted_by`` is what ``GrantGuard`` passes: the ``interaction_id`` of its
        approval question, asked through this service and answered yes. Presented with
        ``owner_id``, ``scope`` and the window the question showed the person
        (:func:`~hitl_telegram_channel.grant_terms.shown_window` of ``window_seconds``:
        ``GrantGuard`` shows tenths of a minute), so the service answers the grant only
        when they are the terms approved. It lasts that window from the yes (the route's
        ``max_grant_seconds`` may have cut it when asked). Raises :class:`HitlError` when
        the service answers no grant: ``conflict`` for a question that grants nothing
        (not a grant question, about another scope, owner or window, a no, or a grant
        that has ended), ``not_found`` for one this agent never asked (another
        channel's), or any failure to reach it.
        """
        answer = await asyncio.to_thread(
            self.client.request_grant,
            owner_id,
            scope,
            window_seconds=shown_window(window_seconds),
            interaction_id=granted_by,
        )
        if not answer.granted or answer.grant is None:
            # The service answers 201 granted or an error when an approval is presented;
            # anything else is not a grant, whatever it says.
            raise HitlError(None, "unexpected_response", f"grant not stored: {answer.status}")
        return to_parrot(answer.grant)

    async def is_allowed(self, owner_id: str, scope: str) -> bool:
        """Whether a live grant of this agent covers ``scope`` for ``owner_id``
        (``tool:*`` covers every tool). False when the service cannot say (fail closed):
        ``GrantGuard`` then asks again rather than letting the call through."""
        try:
            found = await asyncio.to_thread(self.client.check_grant, owner_id, scope)
        except Exception as e:  # noqa: BLE001 - whatever went wrong, the answer is no
            logger.warning(
                "grant check for owner %s, scope %s failed (%s): not allowed", owner_id, scope, e
            )
            return False
        return found is not None

    async def revoke(self, grant_id: str) -> bool:
        """Revokes a live grant of this agent at once (every replica and process stops
        honouring it). False when there is none with that id (unknown, another agent's,
        already revoked or expired); :class:`HitlError` when the service could not be
        asked, since then nothing was revoked."""
        try:
            await asyncio.to_thread(self.client.revoke_grant, grant_id)
        except HitlError as e:
            if e.status == 404:
                return False
            raise
        return True

    async def list_active(self, owner_id: str) -> List[Grant]:
        """This agent's live grants for ``owner_id``, soonest expiry first."""
        records = await asyncio.to_thread(self.client.list_grants)
        return [to_parrot(r) for r in records if r.owner_id == owner_id and r.live]
