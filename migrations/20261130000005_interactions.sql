-- no-transaction
-- Every kind of human question (AI-Parrot's HumanInteraction) on the one `confirmations`
-- table: a confirmation is an approval question about a tool call; an interaction is any
-- of the six types. The table keeps its historical name; its rows are "questions".
--
-- SQLite cannot change a CHECK constraint in place, so the table is rebuilt (the
-- documented 12-step procedure): foreign keys off, copy, swap, check, foreign keys on.
-- `-- no-transaction` above lets the PRAGMA take effect; the rebuild itself is one
-- transaction.

PRAGMA foreign_keys = OFF;

BEGIN;

CREATE TABLE questions_new (
    id                  TEXT PRIMARY KEY NOT NULL,
    agent               TEXT NOT NULL,
    route               TEXT NOT NULL,
    chat_id             INTEGER NOT NULL,
    tool                TEXT NOT NULL,
    owner_id            TEXT NOT NULL,
    args_hash           TEXT NOT NULL,
    params_json         TEXT NOT NULL,
    briefing            TEXT NOT NULL,
    context             TEXT,
    allow_edit          INTEGER NOT NULL,
    window_seconds      INTEGER NOT NULL,
    idempotency_key     TEXT,
    callback_token      TEXT NOT NULL UNIQUE,
    message_id          INTEGER,
    -- `completed`: an interaction got its answer (any value, true or false alike).
    status              TEXT NOT NULL
        CHECK (status IN ('pending', 'confirmed', 'cancelled', 'timeout', 'completed')),
    via                 TEXT CHECK (via IN ('operator', 'window', 'timeout', 'withdrawn', 'fail_closed')),
    reason              TEXT NOT NULL,
    decided_by_id       INTEGER,
    decided_by_username TEXT,
    decided_by_name     TEXT,
    created_at          INTEGER NOT NULL,
    expires_at          INTEGER NOT NULL,
    decided_at          INTEGER,
    callback_url        TEXT,
    outcome_shown       INTEGER NOT NULL DEFAULT 0,
    -- Interactions only: the agent's own id, the HumanInteraction as received (echoed
    -- back), the settled value, and the timeout_action a timeout asked the agent to take.
    interaction_id      TEXT,
    interaction_json    TEXT,
    result_json         TEXT,
    timeout_action      TEXT CHECK (timeout_action IN ('escalate', 'retry')),
    CHECK ((status = 'pending') = (via IS NULL AND decided_at IS NULL)),
    CHECK ((interaction_id IS NULL) = (interaction_json IS NULL))
);

INSERT INTO questions_new (id, agent, route, chat_id, tool, owner_id, args_hash, params_json,
    briefing, context, allow_edit, window_seconds, idempotency_key, callback_token, message_id,
    status, via, reason, decided_by_id, decided_by_username, decided_by_name, created_at,
    expires_at, decided_at, callback_url, outcome_shown)
SELECT id, agent, route, chat_id, tool, owner_id, args_hash, params_json,
    briefing, context, allow_edit, window_seconds, idempotency_key, callback_token, message_id,
    status, via, reason, decided_by_id, decided_by_username, decided_by_name, created_at,
    expires_at, decided_at, callback_url, outcome_shown
FROM confirmations;

DROP TABLE confirmations;
ALTER TABLE questions_new RENAME TO confirmations;

CREATE UNIQUE INDEX confirmations_idempotency
    ON confirmations (agent, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX confirmations_pending ON confirmations (expires_at) WHERE status = 'pending';
CREATE INDEX confirmations_unshown ON confirmations (decided_at)
    WHERE status <> 'pending' AND outcome_shown = 0 AND message_id IS NOT NULL;
-- An agent's interaction_id names one question: AI-Parrot sends the same interaction
-- once per recipient, and every copy must land on the same record.
CREATE UNIQUE INDEX confirmations_interaction
    ON confirmations (agent, interaction_id) WHERE interaction_id IS NOT NULL;

-- Each person's answer, one per person and question. A confirmation's tap is an answer
-- too: one pipeline for every kind of question.
CREATE TABLE answers (
    seq           INTEGER PRIMARY KEY NOT NULL,
    question_id   TEXT NOT NULL REFERENCES confirmations (id),
    respondent    TEXT NOT NULL,
    user_id       INTEGER,
    username      TEXT,
    name          TEXT,
    value_json    TEXT NOT NULL,
    is_default    INTEGER NOT NULL DEFAULT 0,
    at            INTEGER NOT NULL
);
CREATE UNIQUE INDEX answers_one_per_person ON answers (question_id, user_id)
    WHERE user_id IS NOT NULL;

-- Further messages of one question: an interaction sent to several people in private
-- chats has one message per person. The first destination lives on the question row.
CREATE TABLE copies (
    question_id   TEXT NOT NULL REFERENCES confirmations (id),
    recipient     TEXT NOT NULL,
    chat_id       INTEGER NOT NULL,
    message_id    INTEGER,
    outcome_shown INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (question_id, chat_id)
);

-- A multi_choice selection in progress (toggled, not yet sent with Done), per person.
CREATE TABLE selections (
    question_id   TEXT NOT NULL REFERENCES confirmations (id),
    user_id       INTEGER NOT NULL,
    keys_json     TEXT NOT NULL,
    PRIMARY KEY (question_id, user_id)
);

-- What `GET /v1/events` streams: each agent's answers and status changes, written in the
-- same transaction as the change, numbered for resumption with Last-Event-ID.
CREATE TABLE agent_events (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    agent         TEXT NOT NULL,
    question_id   TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('response', 'status')),
    data          TEXT NOT NULL,
    at            INTEGER NOT NULL
);
CREATE INDEX agent_events_agent ON agent_events (agent, seq);
CREATE INDEX agent_events_at ON agent_events (at);

PRAGMA foreign_key_check;

COMMIT;

PRAGMA foreign_keys = ON;
