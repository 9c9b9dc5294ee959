-- MCP tool pins (issue 48, "no rug pulls"): what each gateway's upstream server offers,
-- as approvers allowed it. Times are Unix epoch milliseconds, as everywhere here.
--
-- `mcp_servers`: one row per (agent, server) once its first `tools/list` was recorded,
-- so that "first listing" is decided once, by the database (`ON CONFLICT DO NOTHING`),
-- whichever gateway or replica asks first. `pin_mode` is how it was taken (`first`:
-- allowed as listed; `strict`: held until allowed).
CREATE TABLE mcp_servers (
    agent           TEXT NOT NULL,
    server          TEXT NOT NULL,
    first_listed_at INTEGER NOT NULL,
    pin_mode        TEXT NOT NULL CHECK (pin_mode IN ('first', 'strict')),
    route           TEXT NOT NULL,
    PRIMARY KEY (agent, server)
);

-- `mcp_tool_pins`: one row per tool of a server, keyed by (agent, server, tool).
-- * `allowed_*`: the definition that may be used (its SHA-256 and canonical JSON), when
--   and by whom it was allowed (no operator: the first listing, taken as it was).
-- * `pending_*`: the definition listed since that nobody allowed yet (quarantined), the
--   route whose approvers are asked, why (`first_listing`, `new`, `changed`), the
--   token its Allow button carries (several rows share one when a strict first listing
--   is allowed as a whole) and the message showing it (chat and message id, once
--   Telegram took it). Allowing moves it to `allowed_*` with one conditional `UPDATE`
--   on the token, so a tap counts once however many times or places it is tapped.
CREATE TABLE mcp_tool_pins (
    agent               TEXT NOT NULL,
    server              TEXT NOT NULL,
    tool                TEXT NOT NULL,
    first_seen_at       INTEGER NOT NULL,
    allowed_hash        TEXT,
    allowed_json        TEXT,
    allowed_at          INTEGER,
    allowed_by_id       INTEGER,
    allowed_by_username TEXT,
    allowed_by_name     TEXT,
    pending_hash        TEXT,
    pending_json        TEXT,
    pending_since       INTEGER,
    pending_why         TEXT,
    pending_route       TEXT,
    pending_token       TEXT,
    pending_chat_id     INTEGER,
    pending_message_id  INTEGER,
    PRIMARY KEY (agent, server, tool),
    CHECK ((allowed_hash IS NULL) = (allowed_json IS NULL)),
    CHECK ((pending_hash IS NULL) = (pending_token IS NULL))
);
CREATE INDEX mcp_tool_pins_token ON mcp_tool_pins (pending_token)
    WHERE pending_token IS NOT NULL;
