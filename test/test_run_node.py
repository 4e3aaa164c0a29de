"""run_node's reading of a Ctrl-C that arrives inside a C++ call."""

from loco_policy.nodes import interrupted


def raised_inside_conversion():
    """What pybind11 does when Ctrl-C lands in a Python callback it called: a TypeError."""
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as inner:
            raise TypeError('Unable to convert function return value') from inner
    except TypeError as error:
        return error


def test_a_ctrl_c_converted_by_a_binding_counts_as_an_interrupt():
    assert interrupted(raised_inside_conversion())
    assert interrupted(KeyboardInterrupt())


def test_a_plain_error_is_not_an_interrupt():
    try:
        try:
            raise ValueError('bad frame')
        except ValueError:
            raise TypeError('while handling') from None  # no interrupt in the chain
    except TypeError as error:
        assert not interrupted(error)
    assert not interrupted(RuntimeError('x'))
