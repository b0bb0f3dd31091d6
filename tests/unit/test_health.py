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
