#!/usr/bin/env python3
"""Check HumanResponse JSON against the real AI-Parrot package.

The oracle for "would an AI-Parrot agent accept this answer?". Reads from stdin a JSON
array of {"interaction": <HumanInteraction dict>, "response": <HumanResponse dict>} and,
for each item, runs the package's own code:

  interaction     HumanInteraction.model_validate(interaction)
  response        HumanResponse.model_validate_json(json.dumps(response))
                  (extra fields forbidden; approval value must be a bool, multi_choice a
                  list, form a dict)
  interaction_id  response.interaction_id == interaction.interaction_id (the manager
                  looks the interaction up by the response's id; a mismatch is dropped)
  response_type   HumanInteractionManager._validate_response(interaction, response), the
                  classmethod receive_response uses, i.e. _COMPATIBLE_TYPES: a form may be
                  answered as form or free_text, a poll as poll or single_choice, every
                  other type only as itself
  respondent      await HumanInteractionManager.is_valid_respondent(id, respondent), run on
                  a manager whose Redis is an in-memory stand-in holding the interaction:
                  true when target_humans is empty or holds the respondent

Prints a JSON report on stdout and exits 0 when every item passes, 1 when any fails
(the report names them), 2 when the input is not a JSON array of such objects.

Run (any cwd):
    .ci/.venv-parrot/bin/python scripts/validate_human_responses.py < items.json
Running it with another python re-executes it with .ci/.venv-parrot/bin/python.
Install the venv first if needed:
    python3 -m venv .ci/.venv-parrot
    .ci/.venv-parrot/bin/python -m pip install ai-parrot==1.2.4

AI-Parrot's configuration layer (navconfig) refuses to import without `env/dev/.env` and
`etc/config.ini` under $SITE_ROOT (in a venv it otherwise uses the venv's parent) and
creates folders there, so the script builds that scaffold in a temporary directory,
points SITE_ROOT at it and chdirs there before importing parrot. stdin is read before.
"""

import asyncio
import importlib.metadata
import importlib.util
import json
import sys

from _parrot_env import VENV_PYTHON, ensure_parrot_python, enter_parrot_scaffold


def fail_input(message):
    print(json.dumps({"error": message}))
    sys.exit(2)


ensure_parrot_python(__file__, lambda: fail_input(
    f"ai-parrot is not importable; install it with {VENV_PYTHON} -m pip install ai-parrot==1.2.4"))
RAW = sys.stdin.read()  # before the chdir, in case stdin is a relative-path redirect
enter_parrot_scaffold()

import logging  # noqa: E402

logging.disable(logging.CRITICAL)

from parrot.human import HumanInteraction, HumanInteractionManager, HumanResponse  # noqa: E402

VERSION = importlib.metadata.version("ai-parrot")


class FakeRedis:
    """Just enough Redis for HumanInteractionManager._load_interaction."""

    def __init__(self):
        self.data = {}

    async def get(self, key):
        return self.data.get(key)

    async def setex(self, key, ttl, value):
        self.data[key] = value


def error_text(exc):
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            return "; ".join(
                f"{'.'.join(str(p) for p in e.get('loc', ())) or '<model>'}: {e.get('msg')}"
                for e in errors()
            )
        except Exception:  # noqa: BLE001 - fall back to the plain message
            pass
    return f"{type(exc).__name__}: {exc}"


async def check(index, item):
    entry = {"index": index, "ok": False, "checks": {}, "errors": []}
    checks, errors = entry["checks"], entry["errors"]
    if not isinstance(item, dict) or set(item) != {"interaction", "response"}:
        errors.append('item must be an object with exactly "interaction" and "response"')
        return entry

    try:
        interaction = HumanInteraction.model_validate(item["interaction"])
        checks["interaction"] = True
        entry["interaction_id"] = interaction.interaction_id
        entry["interaction_type"] = interaction.interaction_type.value
    except Exception as exc:  # noqa: BLE001 - report any rejection
        checks["interaction"] = False
        errors.append(f"interaction: {error_text(exc)}")
        interaction = None

    try:
        response = HumanResponse.model_validate_json(json.dumps(item["response"]))
        checks["response"] = True
        entry["response_type"] = response.response_type.value
        entry["respondent"] = response.respondent
    except Exception as exc:  # noqa: BLE001
        checks["response"] = False
        errors.append(f"response: {error_text(exc)}")
        response = None

    if interaction is not None and response is not None:
        checks["interaction_id"] = response.interaction_id == interaction.interaction_id
        if not checks["interaction_id"]:
            errors.append(f"interaction_id: response names {response.interaction_id!r}, "
                          f"interaction is {interaction.interaction_id!r}")

        checks["response_type"] = HumanInteractionManager._validate_response(interaction, response)
        if not checks["response_type"]:
            accepted = sorted(HumanInteractionManager._COMPATIBLE_TYPES.get(
                interaction.interaction_type.value, {interaction.interaction_type.value}))
            errors.append(f"response_type: {response.response_type.value!r} is not accepted "
                          f"for a {interaction.interaction_type.value!r} interaction "
                          f"(accepted: {accepted})")

        manager = HumanInteractionManager(channels={})
        manager._redis = FakeRedis()
        await manager._persist_interaction(interaction)
        checks["respondent"] = await manager.is_valid_respondent(
            response.interaction_id, response.respondent)
        if not checks["respondent"]:
            errors.append(f"respondent: {response.respondent!r} is not in target_humans "
                          f"{interaction.target_humans}"
                          if checks["interaction_id"] else
                          "respondent: no interaction under the response's interaction_id "
                          "(is_valid_respondent fails closed)")

    entry["ok"] = not errors and all(checks.values())
    return entry


async def run(items):
    return [await check(i, item) for i, item in enumerate(items)]


def main():
    try:
        items = json.loads(RAW)
    except json.JSONDecodeError as exc:
        fail_input(f"stdin is not JSON: {exc}")
    if not isinstance(items, list):
        fail_input("stdin must be a JSON array")
    results = asyncio.run(run(items))
    failed = [r["index"] for r in results if not r["ok"]]
    print(json.dumps({
        "aiparrot_version": VERSION,
        "total": len(results),
        "passed": len(results) - len(failed),
        "failed": len(failed),
        "failed_indices": failed,
        "results": results,
    }, indent=2, ensure_ascii=False))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
