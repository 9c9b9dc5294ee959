"""What the end-to-end drivers ask about: the tool the agent wants to run, its
parameters, running one ConfirmationGuard scenario, and the channel that says what it
asked. Import after ``_protocol.enter_parrot_scaffold()``."""

import json
import time
from typing import List

from parrot.auth.confirmation import compute_args_hash
from pydantic import BaseModel, Field

from _protocol import emit
from hitl_telegram_channel import HitlTelegramChannel


class DeployArgs(BaseModel):
    service: str = Field(description="Service to deploy")
    replicas: int = Field(description="How many replicas")
    ratio: float = Field(description="Canary share")
    force: bool = Field(description="Skip the health check")
    tags: List[str] = Field(description="Release tags")


class DeployTool:
    """What ConfirmationGuard reads from an AbstractTool: name, routing_meta,
    args_schema. (Instantiating a real AbstractTool subclass needs the separate
    ai-parrot-tools package, which ai-parrot 1.2.4 does not install.)"""

    name = "deploy"
    description = "Deploy a service"
    args_schema = DeployArgs

    def __init__(self, routing_meta):
        self.routing_meta = routing_meta


#: The briefing every scenario's tool renders unless it names another.
FULL_TEMPLATE = "Deploy {service} with {replicas} replicas ({params})?"


def deploy_tool(*, allow_edit=False, window=0, template=FULL_TEMPLATE):
    return DeployTool(
        routing_meta={
            "requires_confirmation": True,
            "confirm_template": template,
            "confirm_window_seconds": window,
            "allow_edit": allow_edit,
        }
    )


def params(service):
    # An int, a float, a bool, non-ASCII text: what must come back exactly.
    return {"service": service, "replicas": 3, "ratio": 0.1, "force": False, "tags": ["blue", "café"]}


class Current:
    """The scenario running now, which the announcing channels report with each
    question they post."""

    scenario = None


def decision_json(d):
    return json.loads(d.model_dump_json())


async def confirm(scenario, guard, tool, call_params, report=None):
    """Runs one guard decision and reports it as the scenario's ``result``, with the
    guard's argument hash of the call and whatever ``report()`` adds."""
    Current.scenario = scenario
    t0 = time.monotonic()
    decision = await guard.confirm(tool=tool, parameters=call_params)
    emit({
        "event": "result",
        "scenario": scenario,
        "decision": decision_json(decision),
        "sent_parameters": call_params,
        "args_hash": compute_args_hash(call_params),
        "elapsed": round(time.monotonic() - t0, 3),
        **(report() if report else {}),
    })


class AnnouncingChannel(HitlTelegramChannel):
    """Says on the protocol when a question was posted, so the test can answer it."""

    async def send_interaction(self, interaction, recipient):
        accepted = await super().send_interaction(interaction, recipient)
        call = self.call_for(interaction.interaction_id)
        announce(interaction, accepted, target=self.target_for(recipient),
                 call=call.body() if call is not None else None)
        return accepted


def announce(interaction, accepted, **more):
    """Says on the protocol that a question was posted (``asked``), in the running
    scenario, with what the channel adds (``more``)."""
    emit({
        "event": "asked",
        "scenario": Current.scenario,
        "interaction_id": interaction.interaction_id,
        "interaction_type": interaction.interaction_type.value,
        "question": interaction.question,
        "target_humans": list(interaction.target_humans),
        "accepted": accepted,
        **more,
    })
