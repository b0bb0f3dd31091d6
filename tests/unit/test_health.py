from processor.health import Health


def test_ready_until_a_problem_is_reported_and_again_when_cleared():
    h = Health()
    assert h.ready
    h.report("s3", "endpoint unreachable")
    assert not h.ready
    assert [(p.component, p.reason) for p in h.problems()] == [("s3", "endpoint unreachable")]
    h.clear("s3")
    assert h.ready


def test_fatal_problem_is_never_cleared_and_is_reported_as_fatal():
    h = Health()
    h.report("data_path", "RuntimeError: boom", fatal=True)
    h.clear("data_path")
    assert not h.ready
    fatal = h.fatal()
    assert fatal is not None and fatal.reason == "RuntimeError: boom"


def test_repeated_reason_keeps_its_first_time():
    h = Health()
    h.report("follower", "behind")
    first = h.problems()[0].since_s
    h.report("follower", "behind")
    assert h.problems()[0].since_s == first


def test_each_source_clears_only_its_own_problem():
    """The storage probe finding the bucket reachable does not clear the data path's finding."""
    from processor.health import DATA_PATH, PROBE

    h = Health()
    h.report("storage", "copy of orders-0 blocked: S3 PutObject failed: AccessDenied")  # the data path
    h.report("storage", "S3 unreachable", source=PROBE)
    assert [(p.component, p.source) for p in h.problems()] == [("storage", DATA_PATH), ("storage", PROBE)]
    h.clear("storage", source=PROBE)  # HeadBucket answers again
    assert not h.ready
    assert [p.reason for p in h.problems()] == ["copy of orders-0 blocked: S3 PutObject failed: AccessDenied"]
    h.clear("storage")  # a copy succeeded
    assert h.ready
