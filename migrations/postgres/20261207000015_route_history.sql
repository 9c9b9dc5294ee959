-- A route's history by time: the index of the SQLite migration of the same name, whose
-- header says why.
CREATE INDEX confirmations_route_created ON confirmations (route, created_at);
