"""course.checks.lent: the names a learner's function calls, bound in its globals for a check and put back after, as
on an engine whose namespace lacks them or holds a learner's older version."""

from __future__ import annotations

from course.checks import lent


def _calls_update():
    return update()  # noqa: F821 - bound by lent, as on an engine


def test_a_name_missing_is_bound_for_the_block_and_gone_after():
    assert "update" not in _calls_update.__globals__
    with lent(_calls_update, update=lambda: "new"):
        assert _calls_update() == "new"
    assert "update" not in _calls_update.__globals__


def test_an_older_binding_is_replaced_for_the_block_and_put_back_after_even_on_error():
    space = {}
    exec("def ring():\n    return update()", space)
    space["update"] = old = lambda: "old"
    try:
        with lent(space["ring"], update=lambda: "fixed"):
            assert space["ring"]() == "fixed"
            raise RuntimeError("the answer failed")
    except RuntimeError:
        pass
    assert space["update"] is old
