-- The console's list of ended questions (issue 37): the questions someone was asked
-- that ended, the latest decision first, paged by (decided_at, id). Partial on the very
-- `via` list the query names, so the calls a window, a rule or a grant let through
-- unasked (most of the table, on a busy agent) are not in it.
CREATE INDEX confirmations_ended ON confirmations (decided_at, id)
    WHERE via IN ('operator', 'timeout', 'withdrawn', 'fail_closed');
