-- The append-only, hash-chained audit trail. Each row's hash covers the previous row's
-- hash and its own content (see src/domain/audit.rs), so an edit or a deletion breaks
-- the chain; `hitl-telegram audit verify` names the first broken row. The triggers stop
-- accidental edits through SQLite; the chain catches deliberate ones.

CREATE TABLE audit_events (
    seq             INTEGER PRIMARY KEY NOT NULL,
    at              INTEGER NOT NULL,
    confirmation_id TEXT,
    kind            TEXT NOT NULL,
    actor           TEXT NOT NULL,
    detail          TEXT NOT NULL,
    prev_hash       TEXT NOT NULL,
    hash            TEXT NOT NULL
);

CREATE INDEX audit_events_confirmation ON audit_events (confirmation_id, seq);
CREATE INDEX audit_events_at ON audit_events (at);

CREATE TRIGGER audit_events_no_update BEFORE UPDATE ON audit_events
BEGIN
    SELECT RAISE(ABORT, 'audit_events is append-only');
END;

CREATE TRIGGER audit_events_no_delete BEFORE DELETE ON audit_events
BEGIN
    SELECT RAISE(ABORT, 'audit_events is append-only');
END;
