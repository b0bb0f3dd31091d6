from __future__ import annotations

from processor.leader.offload_buffer import OffloadBuffer
from processor.leader.roll_policy import RollPolicy, RollReason


def test_roll_by_size_and_by_time() -> None:
    p = RollPolicy(segment_bytes=1000, segment_ms=500)
    assert p.check(999, 0, 100) is None
    assert p.check(1000, 0, 100) is RollReason.SIZE
    assert p.check(10, 0, 500) is RollReason.TIME
    assert p.check(0, 0, 10_000) is None  # nothing to roll


def test_buffer_bound_and_hysteresis() -> None:
    b = OffloadBuffer(1000, resume_fraction=0.5)
    assert b.fits(5000)  # an empty buffer takes one oversized record
    b.add(600)
    assert b.fits(400) and not b.fits(401)
    b.add(400)
    assert not b.can_resume()
    b.release(400)
    assert not b.can_resume()  # 600 > 500
    b.release(100)
    assert b.can_resume()
    assert b.peak == 1000
