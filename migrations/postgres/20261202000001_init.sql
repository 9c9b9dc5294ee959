-- The PostgreSQL schema: the SQLite schema as its migrations (../*.sql) leave it, in one
-- step (there is no PostgreSQL history to carry). The same tables, columns and
-- constraints; what differs is only what PostgreSQL needs:
-- * every integer is BIGINT (Telegram ids and epoch-millisecond times need 64 bits, and
--   the store decodes every integer as i64: INTEGER would not decode), flags are
--   BOOLEAN, strings TEXT;
-- * where SQLite reads rows in `rowid` order (copies, strays, the outbox), an identity
--   column `pos` keeps insertion order;
-- * the audit trail's append-only guard is a trigger function that raises.
-- Times are Unix epoch milliseconds (UTC), as in SQLite.

-- Every kind of question (a confirmation of a tool call, or an AI-Parrot interaction).
CREATE TABLE confirmations (
    id                       TEXT PRIMARY KEY,
    agent                    TEXT NOT NULL,
    route                    TEXT NOT NULL,
    chat_id                  BIGINT NOT NULL,
    tool                     TEXT NOT NULL,
    owner_id                 TEXT NOT NULL,
    args_hash                TEXT NOT NULL,
    params_json              TEXT NOT NULL,
    briefing                 TEXT NOT NULL,
    context                  TEXT,
    allow_edit               BOOLEAN NOT NULL,
    window_seconds           BIGINT NOT NULL,
    idempotency_key          TEXT,
    callback_token           TEXT NOT NULL UNIQUE,
    message_id               BIGINT,
    -- `completed`: an interaction got its answer (any value, true or false alike).
    status                   TEXT NOT NULL
        CHECK (status IN ('pending', 'confirmed', 'cancelled', 'timeout', 'completed')),
    via                      TEXT
        CHECK (via IN ('operator', 'window', 'timeout', 'withdrawn', 'fail_closed')),
    reason                   TEXT NOT NULL,
    decided_by_id            BIGINT,
    decided_by_username      TEXT,
    decided_by_name          TEXT,
    created_at               BIGINT NOT NULL,
    expires_at               BIGINT NOT NULL,
    decided_at               BIGINT,
    callback_url             TEXT,
    -- Whether the (first) Telegram message shows the outcome yet (restart recovery).
    outcome_shown            BOOLEAN NOT NULL DEFAULT FALSE,
    -- Interactions only: the agent's own id, the HumanInteraction as received, the
    -- settled value, and the timeout_action a timeout asked the agent to take.
    interaction_id           TEXT,
    interaction_json         TEXT,
    result_json              TEXT,
    timeout_action           TEXT CHECK (timeout_action IN ('escalate', 'retry')),
    -- What the agent asked for when the route's `max_window_seconds` cut it.
    window_requested_seconds BIGINT,
    -- Confirmed with "Approve once": no window opens.
    approved_once            BOOLEAN NOT NULL DEFAULT FALSE,
    -- An interaction that carries a tool call, shown like a confirmation.
    has_call                 BOOLEAN NOT NULL DEFAULT FALSE,
    -- The first message's file with the full parameters was sent (or needed none).
    attached                 BOOLEAN NOT NULL DEFAULT FALSE,
    -- The operator's side (issue 15): a denial's reason, "+N min" taps, reminders
    -- claimed, "Deny with reason" taps, and when the question was escalated.
    denial_reason            TEXT,
    extensions               BIGINT NOT NULL DEFAULT 0,
    reminders_sent           BIGINT NOT NULL DEFAULT 0,
    escalated_at             BIGINT,
    reasons_requested        BIGINT NOT NULL DEFAULT 0,
    -- A terminal request always says how and when it ended.
    CHECK ((status = 'pending') = (via IS NULL AND decided_at IS NULL)),
    CHECK ((interaction_id IS NULL) = (interaction_json IS NULL))
);

-- One request per agent and idempotency key; keys older than 24 h are released (set to
-- NULL) by the store before a new request may take them.
CREATE UNIQUE INDEX confirmations_idempotency
    ON confirmations (agent, idempotency_key) WHERE idempotency_key IS NOT NULL;
-- An agent's interaction_id names one question (AI-Parrot sends one per recipient).
CREATE UNIQUE INDEX confirmations_interaction
    ON confirmations (agent, interaction_id) WHERE interaction_id IS NOT NULL;
-- Restart recovery and the scheduler only ever look at pending requests.
CREATE INDEX confirmations_pending ON confirmations (expires_at) WHERE status = 'pending';
CREATE INDEX confirmations_pending_agent ON confirmations (agent) WHERE status = 'pending';
CREATE INDEX confirmations_unshown ON confirmations (decided_at)
    WHERE status <> 'pending' AND NOT outcome_shown AND message_id IS NOT NULL;
-- Taps and replies find their question by its message.
CREATE INDEX confirmations_message ON confirmations (chat_id, message_id);

-- Confirmation windows, keyed by route too: an approval on one route never lets calls
-- through on another route with other approvers.
CREATE TABLE windows (
    agent      TEXT NOT NULL,
    route      TEXT NOT NULL,
    owner_id   TEXT NOT NULL,
    tool       TEXT NOT NULL,
    args_hash  TEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    opened_by  TEXT NOT NULL REFERENCES confirmations (id),
    PRIMARY KEY (agent, route, owner_id, tool, args_hash)
);
CREATE INDEX windows_expiry ON windows (expires_at);
CREATE INDEX windows_opened_by ON windows (opened_by);

-- Signed webhooks to agents, written in the decision's own transaction.
CREATE TABLE webhook_outbox (
    -- Insertion order (SQLite's rowid).
    pos             BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    -- Stable across retries: receivers de-duplicate on it (header X-Hitl-Delivery).
    delivery_id     TEXT PRIMARY KEY,
    confirmation_id TEXT NOT NULL REFERENCES confirmations (id),
    agent           TEXT NOT NULL,
    url             TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    next_attempt_at BIGINT NOT NULL,
    attempts        BIGINT NOT NULL DEFAULT 0,
    last_error      TEXT,
    -- `dropped`: never queued, because the agent already had
    -- `webhooks.max_backlog_per_agent` undelivered ones (kept, with its audit event).
    state           TEXT NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'delivered', 'given_up', 'dropped')),
    finished_at     BIGINT
);
CREATE INDEX webhook_outbox_due ON webhook_outbox (next_attempt_at, pos) WHERE state = 'pending';
CREATE INDEX webhook_outbox_agent_pending ON webhook_outbox (agent, next_attempt_at)
    WHERE state = 'pending';
CREATE INDEX webhook_outbox_dropped ON webhook_outbox (agent) WHERE state = 'dropped';

-- Route chat moves (a group upgraded to a supergroup keeps working after a restart).
CREATE TABLE route_chats (
    route      TEXT PRIMARY KEY,
    chat_id    BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- The append-only, hash-chained audit trail (src/domain/audit.rs). `seq` is assigned by
-- the store under an advisory lock (see src/storage/postgres.rs), not by a sequence: each
-- row's hash covers the previous row's, so rows are numbered in the order they chain.
CREATE TABLE audit_events (
    seq             BIGINT PRIMARY KEY,
    at              BIGINT NOT NULL,
    confirmation_id TEXT,
    kind            TEXT NOT NULL,
    actor           TEXT NOT NULL,
    detail          TEXT NOT NULL,
    prev_hash       TEXT NOT NULL,
    hash            TEXT NOT NULL
);
CREATE INDEX audit_events_confirmation ON audit_events (confirmation_id, seq);
CREATE INDEX audit_events_at ON audit_events (at);

-- The triggers stop accidental edits through the database; the chain catches deliberate
-- ones (a superuser can drop a trigger).
CREATE FUNCTION audit_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_events is append-only';
END;
$$;
CREATE TRIGGER audit_events_no_update BEFORE UPDATE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_append_only();
CREATE TRIGGER audit_events_no_delete BEFORE DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_append_only();
CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only();

-- Each person's answer, one per person and question.
CREATE TABLE answers (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    question_id TEXT NOT NULL REFERENCES confirmations (id),
    respondent  TEXT NOT NULL,
    user_id     BIGINT,
    username    TEXT,
    name        TEXT,
    value_json  TEXT NOT NULL,
    is_default  BOOLEAN NOT NULL DEFAULT FALSE,
    -- An approving answer given with "Approve once".
    once        BOOLEAN NOT NULL DEFAULT FALSE,
    reason      TEXT,
    at          BIGINT NOT NULL
);
CREATE UNIQUE INDEX answers_one_per_person ON answers (question_id, user_id)
    WHERE user_id IS NOT NULL;
CREATE INDEX answers_question ON answers (question_id, seq);

-- Further messages of one question (the first destination lives on the question row).
CREATE TABLE copies (
    -- Insertion order (SQLite's rowid).
    pos           BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    question_id   TEXT NOT NULL REFERENCES confirmations (id),
    recipient     TEXT NOT NULL,
    chat_id       BIGINT NOT NULL,
    message_id    BIGINT,
    outcome_shown BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (question_id, chat_id)
);
CREATE INDEX copies_message ON copies (chat_id, message_id);

-- A multi_choice selection in progress, per person.
CREATE TABLE selections (
    question_id TEXT NOT NULL REFERENCES confirmations (id),
    user_id     BIGINT NOT NULL,
    keys_json   TEXT NOT NULL,
    PRIMARY KEY (question_id, user_id)
);

-- What `GET /v1/events` streams, written in the same transaction as the change. `seq`
-- comes from an identity sequence; the store takes the audit lock in every transaction
-- that writes here, so numbers become visible in the order they were given.
CREATE TABLE agent_events (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent       TEXT NOT NULL,
    question_id TEXT NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('response', 'status')),
    data        TEXT NOT NULL,
    at          BIGINT NOT NULL
);
CREATE INDEX agent_events_agent ON agent_events (agent, seq);
CREATE INDEX agent_events_at ON agent_events (at);

-- Messages of a question learned only from a tap on them.
CREATE TABLE strays (
    -- Insertion order (SQLite's rowid).
    pos           BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    question_id   TEXT NOT NULL REFERENCES confirmations (id),
    chat_id       BIGINT NOT NULL,
    message_id    BIGINT NOT NULL,
    outcome_shown BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (question_id, chat_id, message_id)
);
CREATE INDEX strays_message ON strays (chat_id, message_id);

-- An approver asked to deny with a reason; their reply ends the question.
CREATE TABLE reason_requests (
    question_id       TEXT NOT NULL REFERENCES confirmations (id),
    user_id           BIGINT NOT NULL,
    chat_id           BIGINT NOT NULL,
    prompt_message_id BIGINT,
    asked_at          BIGINT NOT NULL,
    PRIMARY KEY (question_id, user_id)
);
CREATE INDEX reason_requests_prompt ON reason_requests (chat_id, prompt_message_id);
