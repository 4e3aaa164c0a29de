"""Videos of the simulated robot: MuJoCo's offscreen renderer, H.264 MP4, GIF previews (ROS-free).

A ``FrameRenderer`` draws ANYmal C at a given qpos (19,) with MuJoCo's classic OpenGL renderer in a
headless context (EGL where libEGL loads, else OSMesa; ``MUJOCO_GL=egl|osmesa`` chooses), seen by
a free camera whose look-at point follows the base, with text blocks overlaid by ``mjr_overlay``.
``VideoWriter`` encodes frames to H.264 MP4 through the ffmpeg that imageio-ffmpeg bundles.
``RolloutVideo`` turns per-tick states of a rollout into frames at a fixed rate with the commanded
and measured velocity overlaid; ``render_bag`` does the same from a recorded rosbag2 (``/odom``
base pose and twist, ``/joint_states``, ``/cmd_vel``); ``preview_gif`` makes a small GIF of a
video (for pages that show GIFs inline)::

    python -m loco_policy.tools.video runs/demo_<time>/bag -o demo.mp4
    python -m loco_policy.tools.video demo.mp4 -o demo.gif

mujoco, imageio and rosbags are imported only when used.
"""

import argparse
import ctypes.util
from dataclasses import dataclass
import importlib
import json
import os
import sys
import time

import numpy as np

from loco_policy import description, spec

GL_PLATFORMS = ('egl', 'osmesa')
"""Headless OpenGL platforms of MuJoCo's Python bindings, in order of preference."""

FOLLOW_HEIGHT = 0.7
"""Height (m) of the camera's look-at point; it follows the base in x and y only (no bobbing)."""

SOFTWARE_GL = ('llvmpipe', 'softpipe', 'swrast', 'software')
"""Words in GL_RENDERER that mark a software rasteriser (Mesa's, as under EGL without a GPU)."""

BAG_TOPICS = ('/odom', '/joint_states', '/cmd_vel')
"""Topics render_bag reads: base pose and body twist, joint positions, the command."""


class VideoUnavailable(RuntimeError):
    """No headless OpenGL context could be made; the message says why and what to install."""


@dataclass(frozen=True)
class VideoSettings:
    """Where and how a rollout video is written."""

    path: str
    """Output file (.mp4, H.264)."""
    fps: float = 25.0
    """Frames per second of video time (= simulated time)."""
    width: int = 640
    """Frame width (pixels, even)."""
    height: int = 480
    """Frame height (pixels, even)."""
    caption: str = ''
    """Text at the bottom left of every frame (e.g. policy file and simulator)."""
    crf: int = 28
    """H.264 constant rate factor (0 lossless .. 51 worst); higher gives smaller files."""
    shadows: bool | None = None
    """Cast shadows; None: only on a hardware GL (a software rasteriser draws them ~3x slower)."""

    def __post_init__(self):
        """Reject settings the encoder cannot honour."""
        suffix = os.path.splitext(self.path)[1].lower()
        if suffix != '.mp4':
            raise ValueError(
                f'video {self.path!r}: the file must end in .mp4 (GIF: preview_gif of the MP4)'
            )
        if self.width < 16 or self.height < 16 or self.width % 2 or self.height % 2:
            raise ValueError(f'video size {self.width}x{self.height}: both must be even, >= 16')
        if not 0.0 < self.fps <= 100.0:
            raise ValueError(f'video fps {self.fps}: must be in (0, 100]')


def parse_size(text):
    """Parse 'WIDTHxHEIGHT' (pixels) into (width, height)."""
    try:
        width, height = (int(v) for v in text.lower().split('x'))
    except ValueError:
        raise ValueError(f'video size {text!r}: expected WIDTHxHEIGHT, e.g. 640x480') from None
    return width, height


def gl_platform():
    """The headless GL platform: MUJOCO_GL if egl or osmesa, else egl if libEGL, else osmesa."""
    chosen = os.environ.get('MUJOCO_GL', '').strip().lower()
    if chosen in GL_PLATFORMS:
        return chosen
    if ctypes.util.find_library('EGL'):
        return 'egl'
    if ctypes.util.find_library('OSMesa'):
        return 'osmesa'
    raise VideoUnavailable(
        'no headless OpenGL library: neither libEGL nor libOSMesa is installed '
        '(Debian: apt-get install libegl1 or libosmesa6)'
    )


def _gl_context(platform, width, height):
    """Create and make current a MuJoCo GLContext on the platform, or raise VideoUnavailable."""
    try:
        context = importlib.import_module(f'mujoco.{platform}').GLContext(width, height)
        context.make_current()
    except Exception as error:  # the bindings raise ImportError, RuntimeError or GL errors
        other = 'osmesa (apt-get install libosmesa6)' if platform == 'egl' else 'egl'
        raise VideoUnavailable(
            f'cannot create a headless OpenGL context with {platform}: {str(error).rstrip(".")}. '
            f'Try MUJOCO_GL={other.split()[0]} with {other}.'
        ) from None
    return context


def _gl_renderer():
    """GL_RENDERER of the current context, or 'unknown'."""
    try:
        from OpenGL import GL  # PyOpenGL, a dependency of mujoco

        return GL.glGetString(GL.GL_RENDERER).decode(errors='replace')
    except Exception:  # informative only: any failure leaves the defaults
        return 'unknown'


def render_model(width=640, height=480):
    """The robot description with a checker floor, sky, a light following the base, for video."""
    import mujoco

    mj_spec = mujoco.MjSpec.from_file(description.DESCRIPTION_FILE)
    mj_spec.visual.global_.offwidth = max(width, 640)
    mj_spec.visual.global_.offheight = max(height, 480)
    mj_spec.visual.quality.shadowsize = 2048
    mj_spec.visual.headlight.ambient = [0.35, 0.35, 0.35]
    mj_spec.visual.headlight.diffuse = [0.5, 0.5, 0.5]
    mj_spec.add_texture(
        name='sky', type=mujoco.mjtTexture.mjTEXTURE_SKYBOX,
        builtin=mujoco.mjtBuiltin.mjBUILTIN_GRADIENT, width=512, height=3072,
        rgb1=[0.55, 0.7, 0.85], rgb2=[0.95, 0.97, 1.0],
    )  # fmt: skip
    mj_spec.add_texture(
        name='grid', type=mujoco.mjtTexture.mjTEXTURE_2D,
        builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER, width=512, height=512,
        rgb1=[0.32, 0.36, 0.4], rgb2=[0.42, 0.46, 0.5],
        mark=mujoco.mjtMark.mjMARK_EDGE, markrgb=[0.7, 0.72, 0.75],
    )  # fmt: skip
    material = mj_spec.add_material(name='grid', texrepeat=[1.0, 1.0], texuniform=True)
    material.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = 'grid'  # 1 m squares
    floor = mj_spec.geom('floor')
    floor.material, floor.rgba = 'grid', [1.0, 1.0, 1.0, 1.0]
    mj_spec.body(spec.BASE_BODY).add_light(
        mode=mujoco.mjtCamLight.mjCAMLIGHT_TRACKCOM, pos=[1.0, -1.0, 3.5], dir=[-0.3, 0.3, -1.0],
        diffuse=[0.6, 0.6, 0.6], cutoff=45.0, castshadow=True,
    )  # fmt: skip
    model = mj_spec.compile()
    description.check_model(model)  # same qpos layout as the simulated robot
    return model


class FrameRenderer:
    """Renders the robot at a qpos into (height, width, 3) uint8 frames with text overlays."""

    def __init__(
        self, width=640, height=480, shadows=None, distance=2.6, azimuth=130.0, elevation=-20.0
    ):
        """Make the GL context, the render model and its scene.

        shadows None: on unless the GL is a software rasteriser; camera distance in m, angles in
        degrees (azimuth 130: from the front right of a robot facing +x).
        """
        import mujoco

        self._mj = mujoco
        self.width, self.height = int(width), int(height)
        self.platform = gl_platform()
        """The GL platform in use ('egl' or 'osmesa')."""
        self.model = render_model(self.width, self.height)
        self.data = mujoco.MjData(self.model)
        self._gl = _gl_context(self.platform, self.width, self.height)
        self.gl_renderer = _gl_renderer()
        """The GL implementation's GL_RENDERER string (e.g. 'llvmpipe (LLVM 15.0.6, 256 bits)')."""
        software = any(word in self.gl_renderer.lower() for word in SOFTWARE_GL)
        self.shadows = (not software) if shadows is None else bool(shadows)
        """Whether shadows are drawn."""
        scale = mujoco.mjtFontScale
        font = scale.mjFONTSCALE_200 if self.height >= 600 else scale.mjFONTSCALE_150
        font = font if self.height >= 400 else scale.mjFONTSCALE_100
        self._context = mujoco.MjrContext(self.model, font.value)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN.value, self._context)
        self.scene = mujoco.MjvScene(self.model, maxgeom=1000)
        self.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = self.shadows
        self.option = mujoco.MjvOption()
        self.camera = mujoco.MjvCamera()
        self.camera.type = mujoco.mjtCamera.mjCAMERA_FREE
        self.camera.distance, self.camera.azimuth = distance, azimuth
        self.camera.elevation = elevation
        self._viewport = mujoco.MjrRect(0, 0, self.width, self.height)
        self._rgb = np.zeros((self.height, self.width, 3), np.uint8)

    def render(self, qpos, overlays=()):
        """Frame (height, width, 3) uint8 of the robot at qpos (19,); overlays: (gridpos, l, r)."""
        mj = self._mj
        self.data.qpos[:] = qpos
        mj.mj_forward(self.model, self.data)  # body poses and the tracking light's centre of mass
        self.camera.lookat[:] = (qpos[0], qpos[1], FOLLOW_HEIGHT)
        mj.mjv_updateScene(
            self.model, self.data, self.option, None, self.camera,
            mj.mjtCatBit.mjCAT_ALL.value, self.scene,
        )  # fmt: skip
        self._gl.make_current()
        mj.mjr_render(self._viewport, self.scene, self._context)
        for gridpos, left, right in overlays:
            mj.mjr_overlay(
                mj.mjtFont.mjFONT_NORMAL, gridpos, self._viewport, left, right, self._context
            )
        mj.mjr_readPixels(self._rgb, None, self._viewport, self._context)
        return np.flipud(self._rgb).copy()  # OpenGL rows run bottom to top

    def close(self):
        """Free the MuJoCo render context and the GL context."""
        if self._context is not None:
            self._gl.make_current()
            self._context.free()
            self._gl.free()
            self._context = None


def _signed(value):
    """A velocity as '+0.50' / '-0.02' (never '-0.00')."""
    return f'{round(float(value), 2) + 0.0:+.2f}'


def velocity_overlay(t, command, measured, segment='', caption=''):
    """Text blocks (gridpos, left, right) of one frame.

    command and measured are (3,) vx, vy (m/s), wz (rad/s) in the base frame. One table at the
    top left (segment if given, time, then commanded and measured velocity: nothing overlaps in
    narrow frames), the caption at the bottom left.
    """
    import mujoco

    grid = mujoco.mjtGridPos
    names = ['segment'] if segment else []
    values = [segment] if segment else []
    names += ['time', 'vx (m/s)', 'vy (m/s)', 'wz (rad/s)']
    values.append(f'{t:.2f} s')
    values += [f'cmd {_signed(c)}   meas {_signed(m)}' for c, m in zip(command, measured)]
    blocks = [(grid.mjGRID_TOPLEFT, '\n'.join(names), '\n'.join(values))]
    if caption:
        blocks.append((grid.mjGRID_BOTTOMLEFT, caption, ''))
    return blocks


class VideoWriter:
    """Appends (height, width, 3) uint8 frames to an H.264 MP4 (yuv420p, plays everywhere)."""

    def __init__(self, settings):
        """Start ffmpeg on the output file of settings (a VideoSettings); the folder is created."""
        import imageio_ffmpeg  # the tools requirements group

        self.settings = settings
        os.makedirs(os.path.dirname(os.path.abspath(settings.path)), exist_ok=True)
        self.frames = 0
        self._ffmpeg = imageio_ffmpeg.write_frames(
            settings.path, (settings.width, settings.height), fps=settings.fps,
            codec='libx264', quality=None, macro_block_size=2, ffmpeg_log_level='error',
            output_params=['-crf', str(settings.crf), '-movflags', '+faststart'],
        )  # fmt: skip
        self._ffmpeg.send(None)  # starts the process

    def append(self, frame):
        """Encode one frame (height, width, 3) uint8."""
        if frame.shape != (self.settings.height, self.settings.width, 3):
            raise ValueError(f'frame shape {frame.shape} differs from the video size')
        self._ffmpeg.send(np.ascontiguousarray(frame))
        self.frames += 1

    def close(self):
        """Finish the file (ffmpeg writes the index and exits)."""
        if self._ffmpeg is not None:
            self._ffmpeg.close()
            self._ffmpeg = None


def preview_gif(video_path, gif_path, fps=5.0, width=320, colors=48):
    """Write a small looping GIF of a video: fps frames per s, width pixels wide, few colours.

    A camera that follows the robot changes every pixel of every frame and GIF has no motion
    compensation, so the file grows with frames x pixels: a 20 s video gives about 2 MB at the
    defaults. Returns {path, frames, size, bytes}.
    """
    import imageio.v3 as iio
    from PIL import Image

    source_fps = float(iio.immeta(video_path)['fps'])
    images, kept = [], 0
    for index, frame in enumerate(iio.imiter(video_path)):
        if index + 1e-9 < kept * source_fps / fps:  # keep the first frame at or after k / fps
            continue
        image = Image.fromarray(frame)
        height = int(round(image.height * width / image.width / 2)) * 2
        image = image.resize((width, height), Image.Resampling.LANCZOS)
        # one adaptive palette per frame, no dithering: dither noise defeats GIF's compression
        images.append(image.quantize(colors, dither=Image.Dither.NONE))
        kept += 1
    if not images:
        raise ValueError(f'{video_path}: no frames')
    os.makedirs(os.path.dirname(os.path.abspath(gif_path)), exist_ok=True)
    images[0].save(
        gif_path, save_all=True, append_images=images[1:], duration=int(round(1000.0 / fps)),
        loop=0, optimize=True,
    )  # fmt: skip
    size = [images[0].width, images[0].height]
    return {'path': os.path.abspath(gif_path), 'frames': len(images), 'size': size,
            'bytes': os.path.getsize(gif_path)}  # fmt: skip


class RolloutVideo:
    """A video of a rollout: call add() every control tick, close() at the end.

    A frame is rendered at the first tick at or after each frame time k / fps (s), so at 25 fps
    from 50 Hz ticks every other tick is drawn; other rates take the latest tick (<= 20 ms off).
    Reads the states it is given and nothing else: the rollout runs the same with or without it.
    """

    def __init__(self, settings, progress=sys.stderr):
        """Open the renderer and the encoder of settings; progress lines go to progress."""
        self.settings = settings
        self.renderer = FrameRenderer(settings.width, settings.height, settings.shadows)
        try:
            self.writer = VideoWriter(settings)
        except BaseException:
            self.renderer.close()
            raise
        self._progress = progress
        self._segment = None
        self._render_s = 0.0
        self._started = time.perf_counter()

    @property
    def frames(self):
        """Frames written so far."""
        return self.writer.frames

    def add(self, t, qpos, command, measured, segment=''):
        """Offer the state at time t (s): qpos (19,), command and measured (3,) vx vy wz."""
        if segment != self._segment and self._progress is not None:
            print(
                f'video: t={t:6.2f} s segment {segment} (frame {self.frames})', file=self._progress
            )
            self._segment = segment
        while self.frames / self.settings.fps <= t + 1e-9:
            start = time.perf_counter()
            overlay = velocity_overlay(t, command, measured, segment, self.settings.caption)
            frame = self.renderer.render(qpos, overlay)
            self._render_s += time.perf_counter() - start
            self.writer.append(frame)

    def close(self):
        """Finish the file; return a summary (path, frames, size, GL platform, speed, bytes)."""
        self.writer.close()
        self.renderer.close()
        path = self.settings.path
        summary = {
            'path': os.path.abspath(path),
            'frames': self.frames,
            'fps': self.settings.fps,
            'size': [self.settings.width, self.settings.height],
            'gl': self.renderer.platform,
            'gl_renderer': self.renderer.gl_renderer,
            'shadows': self.renderer.shadows,
            'render_fps': round(self.frames / self._render_s, 1) if self._render_s else None,
            'wall_s': round(time.perf_counter() - self._started, 2),
            'bytes': os.path.getsize(path),
        }
        if self._progress is not None:
            print(
                f'video: {path}: {summary["frames"]} frames {self.settings.width}x'
                f'{self.settings.height} at {self.settings.fps:g} fps, GL {summary["gl"]} '
                f'({summary["gl_renderer"]}, shadows {"on" if self.renderer.shadows else "off"}), '
                f'{summary["render_fps"]} frames/s rendered, {summary["bytes"] / 1e6:.2f} MB',
                file=self._progress,
            )
        return summary


def state_qpos(state):
    """The (19,) qpos of a RobotState: base position, quaternion w-x-y-z, joints (robot order)."""
    return np.concatenate([state.base_pos, state.base_quat, state.q])


def read_bag(bag_root):
    """Read /odom, /joint_states and /cmd_vel of a bag (root of splits or one split).

    Returns a dict of arrays, time in s from the first /odom message (bag receive stamps):
    odom_t (N,), qbase (N, 7) position + quaternion w-x-y-z, twist (N, 3) vx vy wz (body frame),
    joint_t (M,), q (M, 12) robot order, cmd_t (K,), cmd (K, 3) vx vy wz.
    """
    from rosbags.rosbag2 import Reader
    from rosbags.typesys import get_typestore

    from loco_policy.tools.bag_writer import list_splits, TYPESTORE

    bag_root = os.path.abspath(bag_root)
    single = os.path.isfile(os.path.join(bag_root, 'metadata.yaml'))
    splits = [bag_root] if single else list_splits(bag_root)
    if not splits:
        raise ValueError(f'{bag_root}: no bag split (a folder with a metadata.yaml) found')
    typestore = get_typestore(TYPESTORE)
    rows = {topic: [] for topic in BAG_TOPICS}
    for split in splits:
        with Reader(split) as reader:
            wanted = [c for c in reader.connections if c.topic in rows]
            for connection, stamp, raw in reader.messages(connections=wanted):
                msg = typestore.deserialize_cdr(raw, connection.msgtype)
                rows[connection.topic].append((stamp * 1e-9, _bag_values(connection.topic, msg)))
    missing = [topic for topic in ('/odom', '/joint_states') if not rows[topic]]
    if missing:
        raise ValueError(f'{bag_root}: no messages on {", ".join(missing)}; cannot pose the robot')
    t0 = min(stamp for stamp, _ in rows['/odom'])
    arrays = {}
    for topic, (t_key, v_key) in zip(
        BAG_TOPICS, (('odom_t', 'odom'), ('joint_t', 'q'), ('cmd_t', 'cmd'))
    ):
        ordered = sorted(rows[topic], key=lambda row: row[0])
        arrays[t_key] = np.array([stamp - t0 for stamp, _ in ordered])
        arrays[v_key] = np.array([values for _, values in ordered]).reshape(len(ordered), -1)
    arrays['qbase'], arrays['twist'] = arrays['odom'][:, :7], arrays.pop('odom')[:, 7:]
    return arrays


def _bag_values(topic, msg):
    """The numbers render_bag needs from one message of topic."""
    if topic == '/odom':
        p, o = msg.pose.pose.position, msg.pose.pose.orientation
        v, w = msg.twist.twist.linear, msg.twist.twist.angular
        return (p.x, p.y, p.z, o.w, o.x, o.y, o.z, v.x, v.y, w.z)
    if topic == '/cmd_vel':
        return (msg.linear.x, msg.linear.y, msg.angular.z)
    index = {name: i for i, name in enumerate(msg.name)}
    missing = [name for name in spec.JOINT_NAMES if name not in index]
    if missing:
        raise ValueError(f'/joint_states lacks joints {missing}')
    return tuple(float(msg.position[index[name]]) for name in spec.JOINT_NAMES)


def _latest(times, t):
    """Index of the last sample at or before t (the first if none)."""
    return max(int(np.searchsorted(times, t, side='right')) - 1, 0)


def render_bag(
    bag_root, out_path, fps=25.0, size=(640, 480), caption=None, shadows=None, progress=sys.stderr
):
    """Render a recorded bag to a video: base pose from /odom, joints, /cmd_vel vs the twist.

    Frame k shows the latest messages at k / fps s after the first /odom; before the first
    /cmd_vel the command reads 0. Returns the summary of RolloutVideo.close().
    """
    data = read_bag(bag_root)
    name = os.path.basename(os.path.normpath(os.path.dirname(os.path.abspath(bag_root))))
    caption = caption if caption is not None else f'bag {name}/{os.path.basename(bag_root)}'
    settings = VideoSettings(out_path, fps, size[0], size[1], caption, shadows=shadows)
    video = RolloutVideo(settings, progress=None)
    end = data['odom_t'][-1]
    frames = int(np.floor(end * fps + 1e-9)) + 1
    report_every = max(int(5.0 * fps), 1)  # a progress line per 5 s of video
    try:
        for k in range(frames):
            t = k / fps
            i, j = _latest(data['odom_t'], t), _latest(data['joint_t'], t)
            command = np.zeros(3)
            if len(data['cmd_t']) and data['cmd_t'][0] <= t:
                command = data['cmd'][_latest(data['cmd_t'], t)]
            qpos = np.concatenate([data['qbase'][i], data['q'][j]])
            video.add(t, qpos, command, data['twist'][i])
            if progress is not None and k % report_every == 0:
                print(f'video: frame {k} of {frames} (t={t:.1f} s)', file=progress)
    finally:
        summary = video.close()
    if progress is not None:
        print(f'video: {out_path}: {summary["frames"]} frames, GL {summary["gl"]}', file=progress)
    return summary


def main(argv=None):
    """`python -m loco_policy.tools.video BAG -o OUT.mp4` (or VIDEO.mp4 -o OUT.gif)."""
    parser = argparse.ArgumentParser(
        description='Render a recorded bag to an MP4, or make a GIF preview of an MP4.'
    )
    parser.add_argument('source', help='bag root (folder of splits) or split folder, or an .mp4')
    parser.add_argument('-o', '--out', required=True, help='output: .mp4 from a bag, .gif')
    parser.add_argument('--fps', type=float, default=None, help='frames per s (25; GIF: 5)')
    parser.add_argument('--size', default='640x480', help='MP4 WIDTHxHEIGHT in pixels')
    parser.add_argument('--width', type=int, default=320, help='GIF width in pixels')
    parser.add_argument(
        '--shadows', action=argparse.BooleanOptionalAction, default=None,
        help='draw shadows (default: only on a hardware GL)',
    )  # fmt: skip
    args = parser.parse_args(argv)
    try:
        if os.path.isfile(args.source):
            if not args.out.lower().endswith('.gif'):
                raise ValueError(f'{args.source} is a file: give a .gif output to preview it')
            summary = preview_gif(args.source, args.out, args.fps or 5.0, args.width)
        else:
            size = parse_size(args.size)
            summary = render_bag(args.source, args.out, args.fps or 25.0, size, None, args.shadows)
    except (ValueError, OSError, VideoUnavailable) as error:
        print(f'video: {error}', file=sys.stderr)
        return 1
    except ModuleNotFoundError as error:
        print(
            f"video: the Python module '{error.name}' is missing: "
            'pip install -r requirements/tools.txt -r requirements/sim.txt',
            file=sys.stderr,
        )
        return 2
    print(json.dumps(summary))
    return 0


if __name__ == '__main__':
    sys.exit(main())
