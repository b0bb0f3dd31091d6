"""Remote reads (the read side's floor, with ``follower``): by offset or timestamp, records or the
archived record batches as stored (``remote_reader``), block access and the one integrity check of
a segment (``segment_blocks``, ``segment_check``), encrypted segments' keys (``segment_keys``), the
local block cache, the read API's JSON shapes and where a read inside a range lost before it was
archived goes on (``lost_ranges``). Every role that reads the archive reads it here."""
