"""loco_policy.tools.video: robot frames rendered offscreen, encoded, read back and checked."""

import json

import numpy as np
import pytest

from loco_policy import description, spec

iio = pytest.importorskip('imageio.v3', reason='video needs imageio (requirements/tools.txt)')
pytest.importorskip('imageio_ffmpeg', reason='video needs imageio-ffmpeg (requirements/tools.txt)')
pytest.importorskip('mujoco', reason='video renders with mujoco (requirements/sim.txt)')

from loco_policy.tools import video  # noqa: E402  (after the skips)

SHIPPED = 'loco_policy/policies/anymal_c_walk.onnx'


@pytest.fixture(scope='module')
def gl():
    """The GL platform, or a skip with the reason no headless context can be made here."""
    try:
        renderer = video.FrameRenderer(32, 24)
    except video.VideoUnavailable as error:
        pytest.skip(f'no headless OpenGL context: {error}')
    renderer.close()
    return renderer.platform


def walking_qpos(k):
    """qpos (19,) of hand-made state k: the base 0.1 m further in x per k, the legs swinging."""
    qpos = description.default_qpos()
    qpos[0] = 0.1 * k
    qpos[7:] += 0.4 * np.sin(0.8 * k + np.arange(spec.NUM_JOINTS))
    return qpos


def test_states_render_to_an_mp4_that_reads_back_frame_by_frame(gl, tmp_path):
    path = tmp_path / 'walk.mp4'
    settings = video.VideoSettings(str(path), fps=10.0, width=160, height=120, caption='test')
    recorder = video.RolloutVideo(settings, progress=None)
    for k in range(10):  # one state per frame time k / fps
        command, measured = np.array([0.5, 0.0, 0.0]), np.array([0.05 * k, 0.0, 0.0])
        recorder.add(k / 10.0, walking_qpos(k), command, measured, 'forward')
    summary = recorder.close()
    assert summary['frames'] == 10 and summary['gl'] == gl in video.GL_PLATFORMS
    assert summary['bytes'] == path.stat().st_size > 1000
    frames = iio.imread(path, index=None)  # (frames, height, width, 3) uint8
    assert frames.shape == (10, 120, 160, 3) and frames.dtype == np.uint8
    assert frames.mean() > 40  # lit scene, not black
    steps = np.abs(np.diff(frames.astype(float), axis=0)).mean(axis=(1, 2, 3))
    assert np.all(steps > 0.5)  # every frame differs from the last: the robot moves
    assert np.abs(frames[-1].astype(float) - frames[0]).mean() > 3.0


def test_overlay_text_and_pose_change_the_frame(gl):
    renderer = video.FrameRenderer(320, 240)
    try:
        plain = renderer.render(walking_qpos(0)).astype(float)
        text = video.velocity_overlay(1.0, [0.5, 0, 0], [0.48, 0, 0], 'forward', 'caption')
        overlaid = renderer.render(walking_qpos(0), text).astype(float)
        legs = walking_qpos(0)
        legs[7:] = walking_qpos(3)[7:]  # same base, other joint angles
        bent = renderer.render(legs).astype(float)
    finally:
        renderer.close()
    top_left = np.abs(overlaid - plain)[:60, :160].mean()
    below = np.abs(overlaid - plain)[130:200, 200:].mean()  # under the table, right of caption
    assert top_left > 5.0 and below == 0.0  # the table top left, the caption bottom left
    assert np.abs(bent - plain)[80:200, 80:240].mean() > 2.0  # the legs moved


def test_gif_preview_takes_every_other_frame_scaled_down(gl, tmp_path):
    mp4, gif = tmp_path / 'walk.mp4', tmp_path / 'walk.gif'
    recorder = video.RolloutVideo(video.VideoSettings(str(mp4), 10.0, 160, 120), progress=None)
    for k in range(10):
        recorder.add(k / 10.0, walking_qpos(k), np.zeros(3), np.zeros(3), 'stand')
    recorder.close()
    summary = video.preview_gif(str(mp4), str(gif), fps=5.0, width=96)
    frames = iio.imread(gif, index=None)
    assert summary['frames'] == len(frames) == 5 and summary['size'] == [96, 72]
    assert frames.shape[1:3] == (72, 96)
    assert iio.immeta(gif, index=0)['duration'] == 200  # ms
    assert np.abs(np.diff(frames[..., :3].astype(float), axis=0)).mean() > 1.0


def test_settings_refuse_what_the_encoder_cannot_write():
    with pytest.raises(ValueError, match='must end in .mp4'):
        video.VideoSettings('out.gif')
    with pytest.raises(ValueError, match='even'):
        video.VideoSettings('out.mp4', width=641)
    with pytest.raises(ValueError, match='WIDTHxHEIGHT'):
        video.parse_size('640 by 480')


def write_bag(root, seconds=1.0, rate=50.0, with_odom=True):
    """A rosbag2 of a robot walking at 0.5 m/s: /odom, /joint_states (shuffled names), /cmd_vel."""
    from rosbags.typesys import get_typestore

    from loco_policy.tools.bag_writer import SplitBagWriter, TYPESTORE

    store = get_typestore(TYPESTORE)
    types = store.types
    writer = SplitBagWriter(root, split_duration=0.5)  # two splits
    writer.add_topic('/joint_states', 'sensor_msgs/msg/JointState')
    writer.add_topic('/odom', 'nav_msgs/msg/Odometry')
    writer.add_topic('/cmd_vel', 'geometry_msgs/msg/Twist')
    vector = lambda x=0.0, y=0.0, z=0.0: types['geometry_msgs/msg/Vector3'](x=x, y=y, z=z)  # noqa: E731
    order = list(reversed(spec.JOINT_NAMES))
    for k in range(int(seconds * rate)):
        t_ns = 1_000_000_000 + int(k * 1e9 / rate)  # a bag need not start at 0
        header = types['std_msgs/msg/Header'](
            stamp=types['builtin_interfaces/msg/Time'](sec=t_ns // 10**9, nanosec=t_ns % 10**9),
            frame_id='odom',
        )
        qpos = walking_qpos(k * 10.0 / rate)
        q = dict(zip(spec.JOINT_NAMES, qpos[7:]))
        joints = types['sensor_msgs/msg/JointState'](
            header=header, name=order, position=np.array([q[n] for n in order]),
            velocity=np.zeros(12), effort=np.zeros(12),
        )  # fmt: skip
        writer.write('/joint_states', t_ns, store.serialize_cdr(joints, joints.__msgtype__))
        if with_odom:
            point = types['geometry_msgs/msg/Point'](x=qpos[0], y=0.0, z=qpos[2])
            quat = types['geometry_msgs/msg/Quaternion'](x=0.0, y=0.0, z=0.0, w=1.0)
            pose = types['geometry_msgs/msg/PoseWithCovariance'](
                pose=types['geometry_msgs/msg/Pose'](position=point, orientation=quat),
                covariance=np.zeros(36),
            )
            twist = types['geometry_msgs/msg/TwistWithCovariance'](
                twist=types['geometry_msgs/msg/Twist'](linear=vector(0.5), angular=vector()),
                covariance=np.zeros(36),
            )
            odom = types['nav_msgs/msg/Odometry'](
                header=header, child_frame_id='base', pose=pose, twist=twist
            )
            writer.write('/odom', t_ns, store.serialize_cdr(odom, odom.__msgtype__))
        if k % 5 == 0 and k >= 10:  # /cmd_vel at 10 Hz from 0.2 s on
            cmd = types['geometry_msgs/msg/Twist'](linear=vector(0.5), angular=vector(z=0.1))
            writer.write('/cmd_vel', t_ns, store.serialize_cdr(cmd, cmd.__msgtype__))
    writer.close()


def test_bag_reads_in_robot_order_and_renders(gl, tmp_path, capsys):
    root = tmp_path / 'bag'
    write_bag(root)
    data = video.read_bag(str(root))
    assert data['odom_t'][0] == 0.0 and data['odom_t'][-1] == pytest.approx(0.98)
    np.testing.assert_allclose(data['q'][7], walking_qpos(7 * 10.0 / 50.0)[7:])  # robot order
    assert data['cmd_t'][0] == pytest.approx(0.2) and data['cmd'][0].tolist() == [0.5, 0.0, 0.1]
    out = tmp_path / 'bag.mp4'
    assert video.main([str(root), '-o', str(out), '--fps', '10', '--size', '128x96']) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    frames = iio.imread(out, index=None)
    assert summary['frames'] == len(frames) == 10  # 0.0 .. 0.9 s
    assert frames.shape[1:] == (96, 128, 3)


def test_bag_without_odometry_is_refused(gl, tmp_path):
    root = tmp_path / 'bag'
    write_bag(root, seconds=0.2, with_odom=False)
    with pytest.raises(ValueError, match='/odom'):
        video.render_bag(str(root), str(tmp_path / 'x.mp4'), progress=None)
    with pytest.raises(ValueError, match='no bag split'):
        video.read_bag(str(tmp_path / 'nothing'))


def test_eval_video_leaves_the_figures_unchanged(gl, tmp_path, capsys):
    from loco_train import cli

    def summary(extra):
        status = cli.main(['eval', SHIPPED, '--sim', 'mujoco', '--seeds', '1', *extra])
        return status, json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    out = tmp_path / 'eval.mp4'
    plain_status, plain = summary([])
    status, with_video = summary(
        ['--video', str(out), '--video-fps', '5', '--video-size', '96x72']
    )
    assert status == plain_status == 0
    shown = with_video.pop('video')
    assert plain.pop('video') is None and with_video == plain  # the same rollout, to the bit
    frames = iio.imread(out, index=None)
    assert shown['frames'] == len(frames) == 101  # 20 s at 5 fps, both ends
    assert frames.shape[1:] == (72, 96, 3)
