-- no-transaction
-- Rules before the human (issue 35).
-- * `via = 'rule'`: a `[[rules]]` rule (or the rules' default) allowed or denied the call
--   without asking; `via = 'grant'`: the grant check (`grant_scope`) refused it (no live
--   grant) or let it through (`require_grant_only`). SQLite cannot change a CHECK constraint in place, so the table is
--   rebuilt as in 20261130000005_interactions.sql (the documented 12-step procedure):
--   foreign keys off, copy, swap, check, foreign keys on.
-- * `rule`: the name of the rule that decided the call (NULL: the rules' default, or no
--   rules in force). Indexed with `created_at` for an `allow` rule's `rate`: how many
--   calls it let through in its period is counted here, so the count survives restarts
--   and is shared by replicas.
-- * `rule_json`: the whole verdict (effect, rule, reason, the rule set's fingerprint,
--   whether it was enforced or a dry run), as the API record and the message show it.

PRAGMA foreign_keys = OFF;

BEGIN;

CREATE TABLE questions_new (
    id                       TEXT PRIMARY KEY NOT NULL,
    agent                    TEXT NOT NULL,
    route                    TEXT NOT NULL,
    chat_id                  INTEGER NOT NULL,
    tool                     TEXT NOT NULL,
    owner_id                 TEXT NOT NULL,
    args_hash                TEXT NOT NULL,
    params_json              TEXT NOT NULL,
    briefing                 TEXT NOT NULL,
    context                  TEXT,
    allow_edit               INTEGER NOT NULL,
    window_seconds           INTEGER NOT NULL,
    idempotency_key          TEXT,
    callback_token           TEXT NOT NULL UNIQUE,
    message_id               INTEGER,
    status                   TEXT NOT NULL
        CHECK (status IN ('pending', 'confirmed', 'cancelled', 'timeout', 'completed')),
    via                      TEXT
        CHECK (via IN ('operator', 'window', 'timeout', 'withdrawn', 'fail_closed', 'rule', 'grant')),
    reason                   TEXT NOT NULL,
    decided_by_id            INTEGER,
    decided_by_username      TEXT,
    decided_by_name          TEXT,
    created_at               INTEGER NOT NULL,
    expires_at               INTEGER NOT NULL,
    decided_at               INTEGER,
    callback_url             TEXT,
    outcome_shown            INTEGER NOT NULL DEFAULT 0,
    interaction_id           TEXT,
    interaction_json         TEXT,
    result_json              TEXT,
    timeout_action           TEXT CHECK (timeout_action IN ('escalate', 'retry')),
    window_requested_seconds INTEGER,
    approved_once            INTEGER NOT NULL DEFAULT 0,
    has_call                 INTEGER NOT NULL DEFAULT 0,
    attached                 INTEGER NOT NULL DEFAULT 0,
    denial_reason            TEXT,
    extensions               INTEGER NOT NULL DEFAULT 0,
    reminders_sent           INTEGER NOT NULL DEFAULT 0,
    escalated_at             INTEGER,
    reasons_requested        INTEGER NOT NULL DEFAULT 0,
    rule                     TEXT,
    rule_json                TEXT,
    CHECK ((status = 'pending') = (via IS NULL AND decided_at IS NULL)),
    CHECK ((interaction_id IS NULL) = (interaction_json IS NULL))
);

INSERT INTO questions_new (id, agent, route, chat_id, tool, owner_id, args_hash, params_json, briefing, context,
    allow_edit, window_seconds, idempotency_key, callback_token, message_id, status, via,
    reason, decided_by_id, decided_by_username, decided_by_name, created_at, expires_at,
    decided_at, callback_url, outcome_shown, interaction_id, interaction_json, result_json,
    timeout_action, window_requested_seconds, approved_once, has_call, attached,
    denial_reason, extensions, reminders_sent, escalated_at, reasons_requested)
SELECT id, agent, route, chat_id, tool, owner_id, args_hash, params_json, briefing, context,
    allow_edit, window_seconds, idempotency_key, callback_token, message_id, status, via,
    reason, decided_by_id, decided_by_username, decided_by_name, created_at, expires_at,
    decided_at, callback_url, outcome_shown, interaction_id, interaction_json, result_json,
    timeout_action, window_requested_seconds, approved_once, has_call, attached,
    denial_reason, extensions, reminders_sent, escalated_at, reasons_requested
FROM confirmations;

DROP TABLE confirmations;
ALTER TABLE questions_new RENAME TO confirmations;

CREATE UNIQUE INDEX confirmations_idempotency
    ON confirmations (agent, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX confirmations_pending ON confirmations (expires_at) WHERE status = 'pending';
CREATE INDEX confirmations_unshown ON confirmations (decided_at)
    WHERE status <> 'pending' AND outcome_shown = 0 AND message_id IS NOT NULL;
CREATE UNIQUE INDEX confirmations_interaction
    ON confirmations (agent, interaction_id) WHERE interaction_id IS NOT NULL;
CREATE INDEX confirmations_rule ON confirmations (rule, created_at) WHERE rule IS NOT NULL;

PRAGMA foreign_key_check;

COMMIT;

PRAGMA foreign_keys = ON;
