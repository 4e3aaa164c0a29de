"""An identification run over ROS: sim_robot hanging with known drives, excitation, recorder.

Three processes over real DDS, as on the robot: sim_robot (MuJoCo backend, ``fixed_base:=true``,
``actuator_file`` = the truth written as an actuator YAML), the excitation node
(``identification_mode:=true``) and the recorder on /joint_command and /joint_states. This
process starts them and waits (no rclpy here); ``env`` carries the ROS environment (domain id,
discovery range). sim_robot steps physics in real time with the latest command it has
received; it stamps its states and the commands its drives took in (/joint_command/applied) on
its physics clock, as a drive bridge does, and the fit reads those commands rather than the
excitation's own stamps.
"""

import os
import subprocess
import time

from loco_policy import spec
from loco_policy.tools.node_process import start_node, stop_process


def write_truth(path, truth):
    """Write truth (ActuatorParams) as an actuator YAML at the spec's commanded gains."""
    from io import StringIO

    from ruamel.yaml import YAML

    from loco_train.actuator import model

    yaml = YAML(typ='safe')
    yaml.default_flow_style = False
    text = StringIO()
    yaml.dump({'robot': 'anymal_c', **model.to_document(truth, spec.KP, spec.KD)}, text)
    with open(path, 'w') as stream:
        stream.write(text.getvalue())
    return path


def _start(module, params, env, log_path):
    """start_node with each 'name:=value' of params as a -p argument."""
    return start_node(module, [arg for param in params for arg in ('-p', param)], env, log_path)


def record(directory, truth, duration=20.0, env=None, seed=0, lead_in=0.5, hold_after=0.3,
           sim_params=(), excitation_params=()):  # fmt: skip
    """Record an excitation of duration s on sim_robot with truth; return the bag root.

    directory receives truth.yaml, the bag and the three logs; sim_params, excitation_params:
    more parameters of those nodes ('name:=value'). Raises RuntimeError with the excitation log's
    tail when the run does not finish.
    """
    os.makedirs(directory, exist_ok=True)
    env = dict(os.environ if env is None else env, PYTHONUNBUFFERED='1')
    truth_file = write_truth(os.path.join(directory, 'truth.yaml'), truth)
    bag = os.path.join(directory, 'bag')
    logs = {name: os.path.join(directory, f'{name}.log') for name in ('sim', 'rec', 'exc')}
    sim = _start('sim_robot', ['fixed_base:=true', 'publish_description:=false',
                               f'actuator_file:={truth_file}', *sim_params], env,
                 logs['sim'])  # fmt: skip
    topics = "topics:=['/joint_command', '/joint_command/applied', '/joint_states']"
    recorder = _start('recorder', [f'output:={bag}', topics, 'flush_period:=0.2'], env,
                      logs['rec'])  # fmt: skip
    excitation = _start(
        'excitation',
        ['identification_mode:=true', f'duration:={float(duration)}', f'seed:={int(seed)}',
         f'lead_in:={float(lead_in)}', f'hold_after:={float(hold_after)}',
         'wait_for_subscribers:=2', *excitation_params],
        env, logs['exc'],
    )  # fmt: skip
    try:
        code = excitation.wait(duration + lead_in + hold_after + 60.0)
        time.sleep(0.5)  # the last messages reach the recorder
    except subprocess.TimeoutExpired:
        code = None
    finally:
        stop_process(excitation)
        stop_process(recorder)
        stop_process(sim)
    if code != 0 or not os.path.isdir(bag):
        tail = open(logs['exc']).read()[-2000:]
        raise RuntimeError(f'the excitation run did not finish (exit {code}): {tail}')
    return bag
