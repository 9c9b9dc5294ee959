-- A route's history by time (issue 50): `/stats` and the rule suggestions read the
-- questions of one route asked since a day (`WHERE route = ? AND created_at >= ?`,
-- latest first). Without this index each read scanned the whole table, which only
-- grows.
CREATE INDEX confirmations_route_created ON confirmations (route, created_at);
