import pytest

from loco_policy.tools import command_schedule


def test_demo_schedule_round_trips_and_is_about_thirty_seconds():
    text = command_schedule.format_schedule(command_schedule.DEMO)
    assert command_schedule.parse(text) == command_schedule.DEMO
    assert 25.0 <= command_schedule.total(command_schedule.DEMO) <= 35.0
    assert [s.name for s in command_schedule.DEMO] == [
        'stand', 'forward', 'turn', 'sideways', 'stop'
    ]  # fmt: skip


def test_lookup_and_errors():
    segments = command_schedule.parse('a:1:0.5,0,0; b:2:0,0,1')
    assert command_schedule.at(segments, 0.5)[0].name == 'a'
    assert command_schedule.at(segments, 2.5)[1].tolist() == [0.0, 0.0, 1.0]
    assert command_schedule.at(segments, 3.5)[0] is None
    for bad in ('a:1:0,0', 'a:0:0,0,0', 'a:x:0,0,0', 'a:1:nan,0,0'):
        with pytest.raises(ValueError, match='schedule segment'):
            command_schedule.parse(bad)
