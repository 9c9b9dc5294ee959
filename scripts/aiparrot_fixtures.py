#!/usr/bin/env python3
"""Wire-format fixtures produced by the real AI-Parrot package.

Writes two files that the Rust tests read as ground truth for what an AI-Parrot agent
sends to (and expects back from) this service:

  tests/fixtures/aiparrot/interactions.json
      {"aiparrot_version", "notes", "cases": {name: <HumanInteraction JSON>},
       "manager_outcomes": [...], "confirmation_guard_decisions": [...]}
      `cases` holds `HumanInteraction(...).model_dump_json()` parsed back to a dict: one
      case per interaction_type, the consensus cases, a timeout_action="default" case, and
      the exact interactions ConfirmationGuard builds (approval, and form for allow_edit),
      captured from the real guard through a recording stand-in for the manager.
      `manager_outcomes` are results computed by the real HumanInteractionManager
      (consensus and timeout), run against an in-memory stand-in for Redis.
      `confirmation_guard_decisions` map manager results to the guard's decisions.

  tests/fixtures/aiparrot/responses.json
      {"aiparrot_version", "notes", "responses": [<HumanResponse JSON>, ...]}
      one `HumanResponse(...).model_dump_json()` per response type the package accepts,
      answering the cases above, in the shapes its channels build them.

Everything is deterministic: interaction ids come from a patched uuid4 (the package's
own default_factory still runs) and timestamps are fixed, so a re-run changes nothing
unless the package does.

Run (any cwd; uses the pinned venv, installing it first if missing):
    python3 -m venv .ci/.venv-parrot
    .ci/.venv-parrot/bin/python -m pip install ai-parrot==1.2.4
    .ci/.venv-parrot/bin/python scripts/aiparrot_fixtures.py [--check]

--check regenerates in memory and exits 1 if the committed files differ.
Running it with another python re-executes it with .ci/.venv-parrot/bin/python.

AI-Parrot's configuration layer (navconfig) refuses to import without a project
scaffold, `env/dev/.env` and `etc/config.ini`, found through $SITE_ROOT (inside a venv it
otherwise uses the venv's parent directory, here .ci/). It also creates folders there
(agents/, logs/, plugins/ ...). So the script builds the scaffold in a temporary
directory, points SITE_ROOT at it and chdirs there before importing parrot.
"""

import argparse
import asyncio
import importlib.metadata
import importlib.util
import json
import sys
import uuid
from datetime import datetime, timedelta, timezone

from _parrot_env import REPO, ensure_parrot_python, enter_parrot_scaffold

OUT_DIR = REPO / "tests" / "fixtures" / "aiparrot"
INTERACTIONS = OUT_DIR / "interactions.json"
RESPONSES = OUT_DIR / "responses.json"


ensure_parrot_python(__file__)
SCAFFOLD = enter_parrot_scaffold()

import logging  # noqa: E402

logging.disable(logging.CRITICAL)  # the package logs warnings we provoke on purpose

from pydantic import BaseModel, Field  # noqa: E402

import parrot.human.models as parrot_models  # noqa: E402
from parrot.auth.confirmation import (  # noqa: E402
    ConfirmationConfig,
    ConfirmationGuard,
    InMemoryConfirmationWindowStore,
    build_form_schema,
)
from parrot.human import (  # noqa: E402
    ChoiceOption,
    ConsensusMode,
    HumanInteraction,
    HumanInteractionManager,
    HumanResponse,
    InteractionResult,
    InteractionStatus,
    InteractionType,
    TimeoutAction,
)

VERSION = importlib.metadata.version("ai-parrot")
T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)


# ── deterministic ids ─────────────────────────────────────────────────────────

class _Ids:
    """Stand-in for uuid4 in parrot.human.models: stable UUIDv4-shaped ids."""

    def __init__(self):
        self.n = 0

    def __call__(self):
        self.n += 1
        return uuid.UUID(f"00000000-0000-4000-8000-{self.n:012x}")


parrot_models.uuid4 = _Ids()


def dump(model):
    """What the package puts on the wire: model_dump_json(), parsed back."""
    return json.loads(model.model_dump_json())


# ── the cases ─────────────────────────────────────────────────────────────────

def three_options(prefix=""):
    return [
        ChoiceOption(key=f"{prefix}a", label="Option A", description="The first one",
                     metadata={"rank": 1}),
        ChoiceOption(key=f"{prefix}b", label="Option B"),
        ChoiceOption(key=f"{prefix}c", label="Option C", description="Has *markdown* _chars_"),
    ]


class DeleteArgs(BaseModel):
    """Args schema of the example tool the guard is asked about."""

    path: str = Field(description="File to delete")
    force: bool = Field(False, description="Delete even if read-only")


class DeleteTool:
    """Just what ConfirmationGuard reads from an AbstractTool."""

    def __init__(self, allow_edit):
        self.name = "delete_file"
        self.args_schema = DeleteArgs
        self.routing_meta = {
            "requires_confirmation": True,
            "confirm_template": "Delete {path} (force={force})?",
            "allow_edit": allow_edit,
        }


GUARD_PARAMS = {"path": "/tmp/x", "force": False}


def build_cases():
    cases = {}
    cases["free_text"] = HumanInteraction(
        question="What should the release be called?",
        context="Release naming",
        target_humans=["alice"],
        source_agent="release-bot",
    )
    cases["single_choice"] = HumanInteraction(
        question="Which environment?",
        interaction_type=InteractionType.SINGLE_CHOICE,
        options=three_options(),
        target_humans=["alice"],
    )
    cases["multi_choice"] = HumanInteraction(
        question="Which services to restart?",
        interaction_type=InteractionType.MULTI_CHOICE,
        options=three_options(),
        target_humans=["alice"],
    )
    cases["approval"] = HumanInteraction(
        question="Deploy v2 to production?",
        interaction_type=InteractionType.APPROVAL,
        target_humans=["alice"],
        timeout=300,
    )
    cases["form"] = HumanInteraction(
        question="Review the parameters",
        interaction_type=InteractionType.FORM,
        form_schema=build_form_schema(DeleteTool(True), dict(GUARD_PARAMS)),
        target_humans=["alice"],
    )
    cases["poll"] = HumanInteraction(
        question="Lunch?",
        interaction_type=InteractionType.POLL,
        options=three_options(),
        target_humans=["alice", "bob", "carol"],
    )
    cases["consensus_all_required"] = HumanInteraction(
        question="Both must approve the migration",
        interaction_type=InteractionType.APPROVAL,
        target_humans=["alice", "bob"],
        consensus_mode=ConsensusMode.ALL_REQUIRED,
    )
    cases["consensus_majority"] = HumanInteraction(
        question="Pick the rollout window",
        interaction_type=InteractionType.SINGLE_CHOICE,
        options=three_options(),
        target_humans=["alice", "bob", "carol"],
        consensus_mode=ConsensusMode.MAJORITY,
    )
    # The package has no quorum-size field: the quorum is derived from
    # len(target_humans) (max(n // 2, 1) answers, then a strict majority of those).
    cases["consensus_quorum"] = HumanInteraction(
        question="Ship it?",
        interaction_type=InteractionType.APPROVAL,
        target_humans=["alice", "bob", "carol", "dave"],
        consensus_mode=ConsensusMode.QUORUM,
    )
    cases["timeout_default_approval"] = HumanInteraction(
        question="Auto-reject if nobody answers in 2 s",
        interaction_type=InteractionType.APPROVAL,
        target_humans=["alice"],
        timeout=2.0,
        timeout_action=TimeoutAction.DEFAULT,
        default_response=False,
    )
    guard_approval, guard_form = capture_guard_interactions()
    cases["confirmation_guard_approval"] = guard_approval
    cases["confirmation_guard_form"] = guard_form
    return cases


# ── ConfirmationGuard, through a recording manager ───────────────────────────

class RecordingManager:
    """Records what ConfirmationGuard asks and answers with a scripted result."""

    def __init__(self, result_for):
        self.asked = []
        self.result_for = result_for

    async def request_human_input(self, interaction, channel="telegram"):
        self.asked.append((interaction.model_copy(deep=True), channel))
        return self.result_for(interaction)

    async def request_human_input_async(self, interaction, channel="telegram",
                                        schedule_timeout=True):
        self.asked.append((interaction.model_copy(deep=True), channel))
        return interaction.interaction_id


def guard_decision(allow_edit, result_for):
    manager = RecordingManager(result_for)
    guard = ConfirmationGuard(InMemoryConfirmationWindowStore(), human_manager=manager,
                              config=ConfirmationConfig())
    decision = asyncio.run(guard.confirm(tool=DeleteTool(allow_edit),
                                         parameters=dict(GUARD_PARAMS)))
    return manager.asked, decision


def completed(value):
    return lambda i: InteractionResult(interaction_id=i.interaction_id,
                                       status=InteractionStatus.COMPLETED,
                                       consolidated_value=value)


def timed_out(value=None):
    return lambda i: InteractionResult(interaction_id=i.interaction_id,
                                       status=InteractionStatus.COMPLETED if value is not None
                                       else InteractionStatus.TIMEOUT,
                                       consolidated_value=value, timed_out=True)


def capture_guard_interactions():
    asked, _ = guard_decision(False, completed(True))
    (approval, channel_a), = asked
    asked, _ = guard_decision(True, completed(dict(GUARD_PARAMS)))
    (form, channel_f), = asked
    assert channel_a == channel_f == "telegram"
    return approval, form


def guard_decisions():
    """How the guard maps a manager result (consolidated_value, timed_out) to a decision."""
    scripted = [
        ("approval", False, "true", completed(True)),
        ("approval", False, "false", completed(False)),
        ("approval", False, "none (cancelled result)", completed(None)),
        ("approval", False, "all_required conflict dict (truthy!)",
         completed({"conflict": True, "responses": [True, False]})),
        ("approval", False, "timed out, cancel action", timed_out()),
        ("approval", False, "timed out, default action, default false", timed_out(False)),
        ("form", True, "edited dict", completed({"path": "/tmp/y", "force": True})),
        ("form", True, "dict failing the args schema, twice",
         completed({"path": None})),
        ("form", True, "free_text string (as Telegram sends an unparsed form)",
         completed("path: /tmp/y")),
        ("form", True, "true", completed(True)),
        ("form", True, "false", completed(False)),
        ("form", True, "none", completed(None)),
        ("form", True, "timed out", timed_out()),
    ]
    out = []
    for kind, allow_edit, label, result_for in scripted:
        asked, decision = guard_decision(allow_edit, result_for)
        sample = result_for(asked[0][0])
        out.append({
            "interaction_type": kind,
            "result": label,
            "consolidated_value": sample.consolidated_value,
            "timed_out": sample.timed_out,
            "times_asked": len(asked),
            "decision": dump(decision),
        })
    return out


# ── the real manager, on an in-memory Redis stand-in ─────────────────────────

class FakeRedis:
    """The few Redis calls HumanInteractionManager makes, kept in a dict."""

    def __init__(self):
        self.data = {}
        self.published = []

    async def setex(self, key, ttl, value):
        self.data[key] = value

    async def get(self, key):
        return self.data.get(key)

    async def publish(self, channel, message):
        self.published.append((channel, message))

    async def close(self):
        pass


def new_manager():
    manager = HumanInteractionManager(channels={})
    manager._redis = FakeRedis()
    return manager


async def run_consensus(case, answers):
    """Feed answers through receive_response; report the result after each one."""
    interaction = case.model_copy(deep=True)
    manager = new_manager()
    await manager._persist_interaction(interaction)
    steps = []
    for i, (who, rtype, value) in enumerate(answers):
        response = HumanResponse(interaction_id=interaction.interaction_id, respondent=who,
                                 response_type=rtype, value=value,
                                 timestamp=T0 + timedelta(seconds=i))
        await manager.receive_response(response)
        result = await manager.get_result(interaction.interaction_id)
        stored = await manager._load_interaction(interaction.interaction_id)
        steps.append({
            "respondent": who,
            "response_type": rtype,
            "value": value,
            "interaction_status": stored.status.value,
            "settled": result is not None,
            "consolidated_value": result.consolidated_value if result else None,
        })
    return steps


async def run_timeout(case):
    """Let the real timeout handler fire (waits case.timeout seconds), then answer late."""
    manager = new_manager()
    interaction = case.model_copy(deep=True)
    result = await manager.request_human_input(interaction, channel="none")
    late = HumanResponse(interaction_id=interaction.interaction_id,
                         respondent=interaction.target_humans[0],
                         response_type=InteractionType.APPROVAL, value=True,
                         timestamp=T0 + timedelta(seconds=interaction.timeout + 1))
    await manager.receive_response(late)
    after = await manager.get_result(interaction.interaction_id)
    return dump(result), dump(late), dump(after)


def manager_outcomes(cases):
    A, S, T = "approval", "single_choice", "free_text"
    scenarios = [
        ("consensus_all_required", "both approve", [("alice", A, True), ("bob", A, True)]),
        ("consensus_all_required", "conflict", [("alice", A, True), ("bob", A, False)]),
        ("consensus_all_required", "stranger counts toward the total",
         [("alice", A, True), ("mallory", A, True)]),
        ("consensus_all_required", "duplicate respondent ignored",
         [("alice", A, True), ("alice", A, False)]),
        ("consensus_majority", "2 of 3 agree", [("alice", S, "a"), ("bob", S, "a")]),
        ("consensus_majority", "three-way split",
         [("alice", S, "a"), ("bob", S, "b"), ("carol", S, "c")]),
        ("consensus_majority", "2 then 1", [("alice", S, "a"), ("bob", S, "b"), ("carol", S, "b")]),
        ("consensus_quorum", "2 of 4 agree", [("alice", A, True), ("bob", A, True)]),
        ("consensus_quorum", "1-1 then 2-1",
         [("alice", A, True), ("bob", A, False), ("carol", A, False)]),
        ("consensus_quorum", "settles at 2-1; a 4th answer re-opens it as a 2-2 conflict",
         [("alice", A, True), ("bob", A, False), ("carol", A, True), ("dave", A, False)]),
        ("approval", "first_response", [("alice", A, False)]),
        ("approval", "wrong response_type dropped", [("alice", T, "yes")]),
        ("form", "form answered as free_text", [("alice", T, "path: /tmp/y")]),
        ("poll", "poll answered as single_choice (first_response)", [("bob", S, "b")]),
    ]
    out = []
    for case_name, label, answers in scenarios:
        out.append({"case": case_name, "scenario": label,
                    "steps": asyncio.run(run_consensus(cases[case_name], answers))})
    result, late, after = asyncio.run(run_timeout(cases["timeout_default_approval"]))
    out.append({"case": "timeout_default_approval",
                "scenario": "nobody answers in time: the real timeout handler's result "
                            "(no HumanResponse is made), then a late answer overwrites it",
                "result": result, "late_response": late, "result_after_late_response": after})
    return out


# ── responses ─────────────────────────────────────────────────────────────────

def build_responses(cases):
    """One response per accepted type, shaped as the package's channels build them."""
    def resp(case, who, rtype, value, ts, metadata):
        return HumanResponse(interaction_id=cases[case].interaction_id, respondent=who,
                             response_type=rtype, value=value, timestamp=ts, metadata=metadata)

    tg = {"channel": "telegram", "chat_id": 123456789, "message_id": 42}
    return [
        # Telegram text reply: timestamp=datetime.now(timezone.utc).isoformat()
        resp("free_text", "alice", "free_text", "Aurora", T0.isoformat(), tg),
        # Telegram inline button ("pick:<key>")
        resp("single_choice", "alice", "single_choice", "b", T0.replace(microsecond=0), tg),
        # Telegram multi-choice "done" (metadata has no message_id there)
        resp("multi_choice", "alice", "multi_choice", ["a", "c"], T0,
             {"channel": "telegram", "chat_id": 123456789}),
        # Telegram approve button ("yes" -> True, "no" -> False)
        resp("approval", "alice", "approval", True, T0, tg),
        resp("confirmation_guard_approval", "123456789", "approval", False, T0, tg),
        # Telegram form reply parsed from "field: value" lines: all values are strings
        resp("form", "alice", "form", {"path": "/tmp/y", "force": "true"}, T0, tg),
        # Telegram form reply that did not parse: stays free_text (accepted for a form)
        resp("confirmation_guard_form", "123456789", "free_text", "looks fine", T0, tg),
        # CLIHumanChannel: response_type = interaction_type and
        # timestamp=datetime.utcnow().isoformat(), a *naive* datetime (no Z)
        resp("poll", "carol", "poll", "c", T0.replace(tzinfo=None).isoformat(),
             {"channel": "cli", "terminal": True}),
        # A poll answered as single_choice, with an explicit non-UTC offset
        resp("poll", "bob", "single_choice", "a",
             T0.astimezone(timezone(timedelta(hours=2))).isoformat(), {}),
    ]


# ── output ────────────────────────────────────────────────────────────────────

INTERACTION_NOTES = [
    "cases: HumanInteraction(...).model_dump_json() parsed; interaction ids come from the "
    "model's own default_factory with uuid4 patched to a counter, so they are stable.",
    "timeout serialises as a JSON float (7200.0, 2.0); notify_provider_options is "
    "exclude=True and never appears; HumanInteraction has no metadata field.",
    "There is no quorum-size field: the manager uses len(target_humans) for every mode.",
    "The ConfirmationGuard cases were captured from the real guard (ai-parrot's "
    "parrot.auth.confirmation) with a recording stand-in for the manager, for a tool "
    "delete_file(path, force) called with {'path': '/tmp/x', 'force': False}; the guard "
    "sets no target_humans and dispatches on channel 'telegram'.",
    "manager_outcomes: the real HumanInteractionManager.receive_response / timeout "
    "handler, on an in-memory stand-in for Redis; 'settled' is whether a result was "
    "persisted after that answer.",
    "confirmation_guard_decisions: the real guard's decision for each scripted manager "
    "result (the form 'dict failing the args schema' case is asked max_edit_retries+1 times).",
]

RESPONSE_NOTES = [
    "responses: HumanResponse(...).model_dump_json() parsed; each answers the case in "
    "interactions.json with the same interaction_id.",
    "timestamp is a pydantic datetime: an aware UTC value dumps as "
    "'YYYY-MM-DDTHH:MM:SS.ffffffZ', the fraction omitted when microseconds are 0; a naive "
    "one (CLIHumanChannel uses datetime.utcnow().isoformat()) dumps with no suffix; any "
    "other offset is kept ('+02:00'). The default (no timestamp given) is "
    "datetime.now(timezone.utc).",
    "extra fields are forbidden; value must be a bool for approval, a list for "
    "multi_choice, a dict for form, anything else otherwise.",
]


def generate():
    cases = build_cases()
    interactions = {
        "aiparrot_version": VERSION,
        "notes": INTERACTION_NOTES,
        "cases": {name: dump(model) for name, model in cases.items()},
        "manager_outcomes": manager_outcomes(cases),
        "confirmation_guard_decisions": guard_decisions(),
    }
    responses = {
        "aiparrot_version": VERSION,
        "notes": RESPONSE_NOTES,
        "responses": [dump(r) for r in build_responses(cases)],
    }
    return interactions, responses


def render(doc):
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the committed fixtures differ from a fresh run")
    args = parser.parse_args()
    interactions, responses = generate()
    outputs = {INTERACTIONS: render(interactions), RESPONSES: render(responses)}
    if args.check:
        stale = [str(p.relative_to(REPO)) for p, text in outputs.items()
                 if not p.exists() or p.read_text() != text]
        if stale:
            print("stale:", ", ".join(stale))
            return 1
        print(f"up to date with ai-parrot {VERSION}")
        return 0
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for path, text in outputs.items():
        path.write_text(text)
        print(f"wrote {path.relative_to(REPO)}")
    print(f"ai-parrot {VERSION}: {len(interactions['cases'])} interaction cases, "
          f"{len(responses['responses'])} responses")
    return 0


if __name__ == "__main__":
    sys.exit(main())
