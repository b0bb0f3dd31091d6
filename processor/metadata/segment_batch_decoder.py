"""The metadata topic's RemoteLogSegmentMetadata records a consumed batch at a time (what a follower
catching up, or any fold of many records, decodes): the whole batch walked by compiled code
(:mod:`processor.metadata.segment_batch_kernel`, numba) and each record built from its row with the
one-record reader's caches and checks (:mod:`processor.metadata.segment_metadata_decoder`), so a
record decodes to the same value either way (tests/unit/test_segment_batch_decoder.py). Pure."""

from __future__ import annotations

from processor.metadata import model_builders
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
    # Columns, not rows, as Python lists: 33 lists for the batch where rows.tolist() made one a
    # record (about half the conversion's cost, and no container per record for the collector).
    epoch_numbers, epoch_starts = pairs[:used].T.tolist()
    epochs = list(zip(epoch_numbers, epoch_starts, strict=True))
    cols = rows.T.tolist()
    states = decoder.STATES
    ids, tails, writers = decoder.SEGMENT_IDS, decoder.RECORD_TAILS, _WRITERS
    build = model_builders.build_record
    new_id, new_uuid = model_builders.build_segment_id, model_builders.uuid_of_text
    out: list[RemoteLogSegmentMetadata | None] = []
    append = out.append
    # the columns every record asks for, one tuple a record (zip reuses it); the others by index
    every = (cols[0], cols[15], cols[22], cols[23], cols[26], cols[24], cols[25], *cols[2:9])
    for i, (
        value,
        ok,
        id_end,
        writer_a,
        writer_b,
        tail_at,
        first,
        n_epochs,
        start,
        end,
        max_ts,
        event_ts,
        writer_epoch,
        size,
        state,
    ) in enumerate(zip(values, *every, strict=True)):
        if not ok:
            append(None)
            continue
        try:
            id_bytes = value[2:id_end]
            segment_id = ids.get(id_bytes)
            if segment_id is None:
                sid = value[cols[20][i] : cols[21][i]].decode()
                if decoder.UUID_TEXT.fullmatch(sid) is None:
                    append(None)
                    continue
                topic_id = None if cols[18][i] < 0 else value[cols[18][i] : cols[19][i]].decode()
                topic = value[cols[16][i] : cols[17][i]].decode()
                segment_id = new_id(topic, cols[1][i], new_uuid(sid), topic_id)
                if len(ids) >= decoder.SEGMENT_IDS_MAX:
                    ids.clear()
                ids[id_bytes] = segment_id
            writer_bytes = value[writer_a:writer_b]
            writer_id = writers.get(writer_bytes)
            if writer_id is None:
                writer_id = writer_bytes.decode()
                if len(writers) >= _WRITERS_MAX:
                    writers.clear()
                writers[writer_bytes] = writer_id
            tail = value[tail_at:]
            fields = tails.get(tail)
            if fields is None:
                fields = (
                    None if cols[27][i] < 0 else value[cols[27][i] : cols[28][i]],
                    cols[13][i] == 1,
                    value[cols[29][i] : cols[30][i]].decode(),
                    value[cols[31][i] : cols[32][i]].decode(),
                    cols[9][i],
                    cols[10][i],
                    cols[11][i],
                    cols[12][i],
                    None if cols[14][i] < 0 else states[cols[14][i]],
                    (),
                )
                if len(tails) >= decoder.RECORD_TAILS_MAX:
                    tails.clear()
                tails[tail] = fields
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
                    start,
                    end,
                    max_ts,
                    event_ts,
                    writer_id,
                    writer_epoch,
                    (epochs[first],) if n_epochs == 1 else tuple(epochs[first : first + n_epochs]),
                    size,
                    states[state],
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
