-- Rules accepted in a route's chat (issue 50): the table of the SQLite migration of the
-- same name, with the same columns (so `migrate-to-postgres` copies them by name) and
-- PostgreSQL's types. Proposals drawn from what people decided,
-- which the route's `rule_editors` try as a dry run and then enforce. Stored here, not in
-- a file, so every replica reads the same ones. Times are Unix epoch milliseconds.
-- * `id`: 16 hex digits of the SHA-256 of the route and the rule: the same proposal
--   made twice is one row, and its buttons carry the id.
-- * `rule_json`: the rule as the configuration would write it (a `[[rules]]` table as
--   JSON); `summary` and `toml` are what the proposal showed.
-- * `state`: `proposed` (decides nothing), `dry_run`, `enforce`, `removed`. A tap moves
--   it with one conditional `UPDATE` on the state it saw, so it counts once.
-- * `added_*`: who accepted it; `changed_*`: who last moved it (enforced or removed).
CREATE TABLE chat_rules (
    id                TEXT PRIMARY KEY,
    route             TEXT NOT NULL,
    name              TEXT NOT NULL,
    effect            TEXT NOT NULL CHECK (effect IN ('allow', 'deny')),
    rule_json         TEXT NOT NULL,
    summary           TEXT NOT NULL,
    toml              TEXT NOT NULL,
    decisions         BIGINT NOT NULL,
    state             TEXT NOT NULL
        CHECK (state IN ('proposed', 'dry_run', 'enforce', 'removed')),
    proposed_at       BIGINT NOT NULL,
    added_at          BIGINT,
    added_by_id       BIGINT,
    added_by_username TEXT,
    added_by_name     TEXT,
    changed_at        BIGINT,
    changed_by_id     BIGINT,
    changed_by_username TEXT,
    changed_by_name   TEXT
);
CREATE INDEX chat_rules_state ON chat_rules (state);
