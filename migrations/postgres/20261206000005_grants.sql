-- Grants (issue 35, AI-Parrot's GrantGuard): the table of the SQLite migration
-- 20261206000011_grants.sql, whose header says what each column and index is for, with
-- the same columns (so `migrate-to-postgres` copies it by name) and PostgreSQL's types.
-- Two replicas presenting the same interaction at once: `grants_interaction` lets one
-- insert through and makes the other's `ON CONFLICT DO NOTHING` write nothing.
CREATE TABLE grants (
    grant_id            TEXT PRIMARY KEY,
    agent               TEXT NOT NULL,
    owner_id            TEXT NOT NULL,
    scope               TEXT NOT NULL,
    route               TEXT NOT NULL,
    reason              TEXT,
    granted_by_id       BIGINT NOT NULL,
    granted_by_username TEXT,
    granted_by_name     TEXT NOT NULL,
    created_at          BIGINT NOT NULL,
    expires_at          BIGINT NOT NULL,
    revoked_at          BIGINT,
    revoked_by_id       BIGINT,
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
