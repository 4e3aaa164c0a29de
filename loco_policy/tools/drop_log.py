"""What a recorder could not write, as a marker in the bag itself (ROS-free).

A recorder whose disk falls behind drops messages rather than its memory. Logged only, the loss
is invisible to whoever reads the bag later: a stretch without messages looks like a robot that
sent none. DropLog collects a run of drops and, at the first message written after it, gives
one marker on DROP_TOPIC (std_msgs/String, JSON):

    {"from_ns": recording time of the first drop, "to_ns": of the last,
     "messages": {topic: messages dropped}}

stamped (recording time) at the last drop, so that it sits where the hole is.
"""

import json

DROP_TOPIC = '/recorder/dropped'
"""The topic of the markers, present in every bag the recorder writes (empty without drops)."""

DROP_TYPE = 'std_msgs/msg/String'


class DropLog:
    """The current run of dropped messages, closed into a marker when writing resumes."""

    def __init__(self):
        self.total = 0  # messages dropped since the start
        self._run = None  # {'from_ns', 'to_ns', 'messages'} of the open run, or None

    def drop(self, topic, stamp_ns):
        """Count one message of topic (recording time stamp_ns) that was not written."""
        self.total += 1
        if self._run is None:
            self._run = {'from_ns': stamp_ns, 'to_ns': stamp_ns, 'messages': {}}
        self._run['to_ns'] = max(self._run['to_ns'], stamp_ns)
        self._run['messages'][topic] = self._run['messages'].get(topic, 0) + 1

    def close(self):
        """(stamp ns, JSON text) of the marker of the open run, which ends; None if none."""
        run, self._run = self._run, None
        if run is None:
            return None
        return run['to_ns'], json.dumps(run, sort_keys=True)


def read_marker(text):
    """The fields of a marker's JSON text: from_ns, to_ns (int), messages {topic: int}."""
    fields = json.loads(text)
    return {
        'from_ns': int(fields['from_ns']),
        'to_ns': int(fields['to_ns']),
        'messages': {str(k): int(v) for k, v in fields['messages'].items()},
    }
