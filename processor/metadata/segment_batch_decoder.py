"""The metadata topic's RemoteLogSegmentMetadata records a consumed batch at a time (what a follower
catching up, or any fold of many records, decodes): the whole batch walked by compiled code
(:mod:`processor.metadata.segment_batch_kernel`, numba) and each record built from its row with the
one-record reader's caches and checks (:mod:`processor.metadata.segment_metadata_decoder`), so a
record decodes to the same value either way (tests/unit/test_segment_batch_decoder.py). Pure."""

from __future__ import annotations

from processor.metadata import segment_metadata_decoder as decoder
from processor.metadata.model import RemoteLogSegmentMetadata

_WRITERS: dict[bytes, str] = {}  # writer ids by their bytes (a handful of writers write every record)
_WRITERS_MAX = 4096


def read_segments(values: list[bytes]) -> list[RemoteLogSegmentMetadata | None]:
    """:func:`read_segment_metadata` of each framed value (a RemoteLogSegmentMetadata's, the framing
    checked by the caller), the whole list walked by compiled code
    (:mod:`processor.metadata.segment_batch_kernel`) and the records built here from its rows, with
    the same caches and checks as the one-record reader. None where the walk or a check leaves the
    value to the one-record path (which then reads it, or leaves it to fastavro)."""
    import numpy as np

    from processor.metadata import segment_batch_kernel as k  # numba: loaded with the first batch

    count = len(values)
    joined = b"".join(values)
    ends = np.cumsum(np.fromiter(map(len, values), np.int64, count))
    starts = ends - np.fromiter(map(len, values), np.int64, count)
    buf = np.frombuffer(joined, np.uint8)
    rows = np.empty((count, k.COLUMNS), np.int64)
    pairs = np.empty((len(joined) // 2 + 1, 2), np.int64)
    starts.flags.writeable = False
    ends.flags.writeable = False
    used = k.read_rows(buf, starts, ends, rows, pairs)
    epochs = list(map(tuple, pairs[:used].tolist()))
    states = decoder.STATES
    ids, tails, writers = decoder.SEGMENT_IDS, decoder.RECORD_TAILS, _WRITERS
    build = decoder.build_record
    new_id, new_uuid = decoder.build_segment_id, decoder.uuid_of_text
    out: list[RemoteLogSegmentMetadata | None] = []
    append = out.append
    for value, row in zip(values, rows.tolist(), strict=True):
        if not row[0]:
            append(None)
            continue
        try:
            id_bytes = value[2 : row[15]]
            segment_id = ids.get(id_bytes)
            if segment_id is None:
                sid = value[row[20] : row[21]].decode()
                if decoder.UUID_TEXT.fullmatch(sid) is None:
                    append(None)
                    continue
                topic_id = None if row[18] < 0 else value[row[18] : row[19]].decode()
                segment_id = new_id(value[row[16] : row[17]].decode(), row[1], new_uuid(sid), topic_id)
                if len(ids) >= decoder.SEGMENT_IDS_MAX:
                    ids.clear()
                ids[id_bytes] = segment_id
            writer_bytes = value[row[22] : row[23]]
            writer_id = writers.get(writer_bytes)
            if writer_id is None:
                writer_id = writer_bytes.decode()
                if len(writers) >= _WRITERS_MAX:
                    writers.clear()
                writers[writer_bytes] = writer_id
            tail = value[row[26] :]
            fields = tails.get(tail)
            if fields is None:
                fields = (
                    None if row[27] < 0 else value[row[27] : row[28]],
                    row[13] == 1,
                    value[row[29] : row[30]].decode(),
                    value[row[31] : row[32]].decode(),
                    row[9],
                    row[10],
                    row[11],
                    row[12],
                    None if row[14] < 0 else states[row[14]],
                    (),
                )
                if len(tails) >= decoder.RECORD_TAILS_MAX:
                    tails.clear()
                tails[tail] = fields
            first = row[24]
            (
                custom,
                txn_index_empty,
                data_key,
                index_key,
                format_version,
                record_count,
                index_crc32,
                index_size,
                replaces,
                supersedes,
            ) = fields
            append(
                build(
                    segment_id,
                    row[2],
                    row[3],
                    row[4],
                    row[5],
                    writer_id,
                    row[6],
                    tuple(epochs[first : first + row[25]]),
                    row[7],
                    states[row[8]],
                    data_key,
                    index_key,
                    format_version,
                    record_count,
                    index_crc32,
                    index_size,
                    custom,
                    txn_index_empty,
                    replaces,
                    supersedes,
                )
            )
        except (UnicodeDecodeError, ValueError):
            append(None)  # the one-record path decides (and fastavro says what is wrong)
    return out
