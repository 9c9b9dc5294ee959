#!/usr/bin/env python3
"""Write starting corpora for the fuzz targets into fuzz/corpus/<target>/.

The seeds come from the repository's own test fixtures (Python-checked args-hash
vectors and briefing cases) plus a few request bodies, so libFuzzer starts from inputs
that reach deep into each parser instead of spending its first minutes finding `{`.
The corpus directory is not committed (see .gitignore); run this before a campaign.
"""

import hashlib
import json
import pathlib

HERE = pathlib.Path(__file__).resolve().parent
FIXTURES = HERE.parent / "tests" / "fixtures"


def write(target: str, seeds: list[bytes]) -> None:
    folder = HERE / "corpus" / target
    folder.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        # Named by content, as libFuzzer names its own finds.
        (folder / hashlib.sha1(seed).hexdigest()).write_bytes(seed)
    print(f"{target}: {len(seeds)} seeds in {folder}")


def main() -> None:
    vectors = json.loads((FIXTURES / "args_hash_vectors.json").read_text())
    cases = json.loads((FIXTURES / "briefing_cases.json").read_text())

    write("args_hash", [v["params_json"].encode() for v in vectors])

    # The briefing target reads `params JSON, 0xFF, template`.
    write(
        "briefing",
        [
            c["params_json"].encode() + b"\xff" + c["template"].encode()
            for c in cases
            if c["template"] is not None
        ],
    )

    write(
        "callback_data",
        [b"a:" + b"0123456789abcdef" * 2, b"c:" + b"fedcba9876543210" * 2, b"a:", b"x:0"],
    )

    bodies = [
        {"tool": "deploy", "params": {"service": "billing", "replicas": 3}},
        {
            "tool": "transfer",
            "params": {"to": "ACME", "amount": 1200.5},
            "owner_id": "alice",
            "template": "Send {amount:,.2f} EUR to {to}?",
            "window_seconds": 600,
            "allow_edit": True,
            "timeout_seconds": 2.007,
            "wait": "suspend",
            "route": "other",
            "idempotency_key": "k-1",
            "context": "monthly run",
            "callback_url": "https://hooks.example/cb/done?x=1",
        },
    ]
    seeds = [json.dumps(b).encode() for b in bodies]
    seeds += [
        json.dumps({"tool": "t", "params": json.loads(v["params_json"])}).encode()
        for v in vectors[:20]
    ]
    # Parameters exactly as the fixtures spell them (the parser must keep the bytes).
    seeds += [
        b'{"tool": "t", "params": ' + v["params_json"].encode() + b"}" for v in vectors
    ]
    write("parse_create", seeds)


if __name__ == "__main__":
    main()
