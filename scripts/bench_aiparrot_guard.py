#!/usr/bin/env python3
"""B1's yardstick: AI-Parrot's own window-hit path, `ConfirmationGuard.confirm()`.

Measures, on one core, how many times per second the real `ConfirmationGuard` (ai-parrot
1.2.4 from PyPI) decides a call that its in-memory window store
(`InMemoryConfirmationWindowStore`) already covers: `compute_args_hash` over the
parameters (json.dumps sort_keys + SHA-256), then the store's lock-guarded dict lookup.
The parameters are the ones the Rust bench (`bench/window_hit.rs`) uses. Each round runs
the calls back to back inside one event loop; the best of the rounds is reported, as
criterion reports a settled mean.

Prints human-readable lines and, last, `RESULT aiparrot_confirm_per_sec <float>` for
`bench/run`.

Run (any cwd; uses the pinned venv, as scripts/aiparrot_fixtures.py does):
    python3 -m venv .ci/.venv-parrot
    .ci/.venv-parrot/bin/python -m pip install ai-parrot==1.2.4
    .ci/.venv-parrot/bin/python scripts/bench_aiparrot_guard.py [--rounds 5] [--calls 200000]
"""

import argparse
import asyncio
import sys
import time

from _parrot_env import ensure_parrot_python, enter_parrot_scaffold


ensure_parrot_python(__file__)
enter_parrot_scaffold()

from parrot.auth.confirmation import (  # noqa: E402
    ConfirmationGuard,
    InMemoryConfirmationWindowStore,
    compute_args_hash,
)

# The same call as bench/window_hit.rs's PARAMS.
PARAMS = {
    "path": "/srv/app/releases/2026-11-30",
    "recursive": True,
    "exclude": ["*.log", "cache/"],
    "retries": 3,
    "timeout": 2.5,
    "owner": "deploy",
}


class DeployTool:
    """Just what ConfirmationGuard reads from an AbstractTool."""

    name = "deploy_release"
    routing_meta = {"requires_confirmation": True, "confirm_window_seconds": 3600}


class Caller:
    """A PermissionContext as far as the guard reads it."""

    user_id = "alice@example.com"


async def measure(rounds, calls):
    store = InMemoryConfirmationWindowStore()
    guard = ConfirmationGuard(store=store)  # no human manager: a miss would fail closed
    tool, caller = DeployTool(), Caller()
    await store.record(caller.user_id, tool.name, compute_args_hash(PARAMS), window_seconds=3600)
    decision = await guard.confirm(tool=tool, parameters=PARAMS, permission_context=caller)
    assert decision.allowed and decision.reason == "within confirmation window", decision
    rates = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            await guard.confirm(tool=tool, parameters=PARAMS, permission_context=caller)
        rates.append(calls / (time.perf_counter() - start))
    return rates


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args()
    rates = asyncio.run(measure(args.rounds, args.calls))
    import parrot  # noqa: E402

    version = getattr(parrot, "__version__", "?")
    print(f"ai-parrot {version}, Python {sys.version.split()[0]}: ConfirmationGuard.confirm() "
          f"window hit, {args.calls} calls x {args.rounds} rounds")
    print("per second by round: " + ", ".join(f"{r:,.0f}" for r in rates))
    print(f"RESULT aiparrot_confirm_per_sec {max(rates):.0f}")


if __name__ == "__main__":
    main()
