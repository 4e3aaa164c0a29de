"""Check a colcon install prefix of loco_policy: share files, ament index, console scripts."""

import configparser
import glob
import importlib
import os
import site as site_module
import sys


def main(prefix):
    """Exit non-zero, naming each problem, when the install tree lacks something required."""
    problems = []
    required = [
        'share/loco_policy/launch/anymal.launch.py',
        'share/loco_policy/package.xml',
        'share/ament_index/resource_index/packages/loco_policy',
        'share/loco_policy/description/anymal_c.xml',
        'share/loco_policy/description/anymal_c.urdf',
        'share/loco_policy/config/robot_description.yaml',
    ]
    for path in required:
        if not os.path.exists(os.path.join(prefix, path)):
            problems.append(f'missing {path}')
    launch_file = os.path.join(prefix, 'share/loco_policy/launch/anymal.launch.py')
    if os.path.exists(launch_file):
        with open(launch_file) as handle:
            compile(handle.read(), launch_file, 'exec')  # a SyntaxError fails the run

    site = glob.glob(os.path.join(prefix, 'lib/python3*/site-packages'))
    entry_files = glob.glob(os.path.join(site[0], 'loco_policy*/entry_points.txt')) if site else []
    for link in glob.glob(os.path.join(site[0], 'loco[-_]policy*.egg-link')) if site else []:
        # --symlink-install: `setup.py develop` leaves the egg-info in the linked build directory
        with open(link) as handle:
            linked = handle.readline().strip()
        entry_files += glob.glob(os.path.join(linked, 'loco_policy*.egg-info/entry_points.txt'))
    if not entry_files:
        problems.append('no entry_points.txt in the installed egg-info')
        scripts = {}
    else:
        parser = configparser.ConfigParser()
        parser.read(entry_files[0])
        scripts = dict(parser['console_scripts']) if 'console_scripts' in parser else {}
    if not scripts:
        problems.append('no console scripts declared')
    if site:
        site_module.addsitedir(site[0])  # also reads the .pth of a --symlink-install
    for name, target in scripts.items():
        script = os.path.join(prefix, 'lib/loco_policy', name)
        if not (os.path.isfile(script) and os.access(script, os.X_OK)):
            problems.append(f'console script {name} not executable under lib/loco_policy')
        module, _, function = target.partition(':')
        try:
            if not callable(getattr(importlib.import_module(module.strip()), function.strip())):
                problems.append(f'{name}: {target} is not callable')
        except Exception as error:  # report every broken entry point, not just the first
            problems.append(f'{name}: cannot load {target}: {error!r}')
    for problem in problems:
        print('install tree:', problem, file=sys.stderr)
    if problems:
        return 1
    print(f'install tree OK: {len(required)} share files, console scripts {sorted(scripts)}')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1]))
