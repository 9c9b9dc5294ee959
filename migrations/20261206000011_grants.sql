-- Grants (issue 35, AI-Parrot's GrantGuard): a human lets `agent` run every call in
-- `scope` (`tool:deploy`, or `tool:*` for every tool) for `owner_id` until `expires_at`
-- (Unix epoch milliseconds, as every time here), unless it is revoked first. Rows are
-- kept after they end: `revoked_at` and `revoked_by_*` say who ended one early (no
-- operator: the agent did), and the approvals they came from stay used.
-- * Where a grant came from is exactly one of `confirmation_id` (the grant question a
--   human approved) and `interaction_id` (an approval of the agent's own that it
--   presented once).
-- * `grants_interaction`: an interaction becomes a grant at most once, whichever
--   replica is asked (NULLs are distinct, so asked grants never collide there); and
--   `grants_question`: a grant question becomes one grant at most.
-- * The lookups: a call's covering grant (agent, owner, exact scope or `kind:*`, live),
--   a route's live grants (`/grants` in the chat), every live grant by expiry.
CREATE TABLE grants (
    grant_id            TEXT PRIMARY KEY,
    agent               TEXT NOT NULL,
    owner_id            TEXT NOT NULL,
    scope               TEXT NOT NULL,
    route               TEXT NOT NULL,
    reason              TEXT,
    granted_by_id       INTEGER NOT NULL,
    granted_by_username TEXT,
    granted_by_name     TEXT NOT NULL,
    created_at          INTEGER NOT NULL,
    expires_at          INTEGER NOT NULL,
    revoked_at          INTEGER,
    revoked_by_id       INTEGER,
    revoked_by_username TEXT,
    revoked_by_name     TEXT,
    confirmation_id     TEXT REFERENCES confirmations (id),
    interaction_id      TEXT,
    CHECK ((confirmation_id IS NULL) <> (interaction_id IS NULL))
);
CREATE INDEX grants_covering ON grants (agent, owner_id, scope, expires_at)
    WHERE revoked_at IS NULL;
CREATE INDEX grants_route ON grants (route, expires_at) WHERE revoked_at IS NULL;
CREATE INDEX grants_expiry ON grants (expires_at);
CREATE UNIQUE INDEX grants_interaction ON grants (agent, interaction_id);
CREATE UNIQUE INDEX grants_question ON grants (confirmation_id);
