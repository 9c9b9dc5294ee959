-- Confirmation requests and confirmation windows.
-- Times are Unix epoch milliseconds (UTC): sortable, compact and unambiguous.

CREATE TABLE confirmations (
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
    status              TEXT NOT NULL CHECK (status IN ('pending', 'confirmed', 'cancelled', 'timeout')),
    via                 TEXT CHECK (via IN ('operator', 'window', 'timeout', 'withdrawn', 'fail_closed')),
    reason              TEXT NOT NULL,
    decided_by_id       INTEGER,
    decided_by_username TEXT,
    decided_by_name     TEXT,
    created_at          INTEGER NOT NULL,
    expires_at          INTEGER NOT NULL,
    decided_at          INTEGER,
    -- A terminal request always says how and when it ended.
    CHECK ((status = 'pending') = (via IS NULL AND decided_at IS NULL))
);

-- One request per agent and idempotency key; keys older than 24 h are released
-- (set to NULL) by the storage layer before a new request may take them.
CREATE UNIQUE INDEX confirmations_idempotency
    ON confirmations (agent, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Restart recovery and the scheduler only ever look at pending requests.
CREATE INDEX confirmations_pending ON confirmations (expires_at) WHERE status = 'pending';

CREATE TABLE windows (
    agent          TEXT NOT NULL,
    owner_id       TEXT NOT NULL,
    tool           TEXT NOT NULL,
    args_hash      TEXT NOT NULL,
    expires_at     INTEGER NOT NULL,
    opened_by      TEXT NOT NULL REFERENCES confirmations (id),
    PRIMARY KEY (agent, owner_id, tool, args_hash)
);

CREATE INDEX windows_expiry ON windows (expires_at);
