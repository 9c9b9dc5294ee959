-- Approvers away (issue 50): `/away until <time> [delegate]` and `/back`. One row per
-- person, replaced by their next /away; a row whose `until` passed means nothing. The
-- delegate is named as in `[people]` (`delegate_name`) with their Telegram id. Times are
-- Unix epoch milliseconds.
CREATE TABLE away (
    person        INTEGER PRIMARY KEY,
    until         INTEGER NOT NULL,
    delegate_id   INTEGER,
    delegate_name TEXT,
    set_at        INTEGER NOT NULL,
    CHECK ((delegate_id IS NULL) = (delegate_name IS NULL))
);
