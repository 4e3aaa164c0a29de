"""A missing optional dependency as one line that names its requirement group (ROS-free).

The groups are the pinned files requirements/<group>.txt of the source tree, or, in an install
without the source tree, the extras of the installed loco_policy distribution (setup.py makes one
extra per group). A module belongs to a group when a requirement of the group provides it, or a
dependency of such a requirement does (one level, with the extras the requirement asks for:
gymnasium[mujoco] brings imageio).
"""

import glob
import importlib.metadata
import importlib.util
import os
import re

GROUPS = ('deploy', 'sim', 'tools', 'train', 'test', 'build')
"""Group search order when the caller names no preference."""

ALIASES = {'warp-lang': 'warp', 'rsl-rl-lib': 'rsl_rl', 'pyyaml': 'yaml', 'pillow': 'PIL'}
"""Distribution name -> import name, where the name rule below does not give it."""

_REQUIREMENT = re.compile(r'^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?')
_EXTRA = re.compile(r'extra\s*==\s*["\']([^"\']+)["\']')


def _normal(name):
    """PEP 503 normal form of a distribution name."""
    return re.sub(r'[-_.]+', '-', name).lower()


def requirements_dir():
    """The source tree's requirements/ directory, or None in an install without it."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # loco_policy/
    path = os.path.join(os.path.dirname(package), 'requirements')
    return path if os.path.isfile(os.path.join(path, 'deploy.txt')) else None


def group_requirements():
    """{group: [requirement line, ...]} from requirements/*.txt, else the installed extras."""
    root = requirements_dir()
    groups = {}
    if root:
        for path in sorted(glob.glob(os.path.join(root, '*.txt'))):
            with open(path) as handle:
                lines = (line.split('#')[0].strip() for line in handle)
                groups[os.path.basename(path)[:-4]] = [line for line in lines if line]
        return groups
    try:
        declared = importlib.metadata.requires('loco_policy') or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    for entry in declared:
        requirement, _, marker = entry.partition(';')
        extra = _EXTRA.search(marker)
        if extra:
            groups.setdefault(extra.group(1), []).append(requirement.strip())
    return groups


def _installed_modules():
    """{normal distribution name: {top-level import names}} of what is installed."""
    modules = {}
    for module, dists in importlib.metadata.packages_distributions().items():
        for dist in dists:
            modules.setdefault(_normal(dist), set()).add(module)
    return modules


def _modules_of(name, installed):
    """Import names a distribution provides: installed metadata, an alias and the name rule."""
    normal = _normal(name)
    guess = re.sub(r'^ros-[a-z]+-', '', normal).replace('-', '_')  # ros-kilted-std-msgs
    return installed.get(normal, set()) | {ALIASES.get(normal, guess), guess}


def _dependencies(name, extras):
    """Requirement names of an installed distribution, with the given extras; [] if absent."""
    try:
        declared = importlib.metadata.requires(name) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    names = []
    for entry in declared:
        requirement, _, marker = entry.partition(';')
        extra = _EXTRA.search(marker)
        if extra is None or extra.group(1) in extras:
            match = _REQUIREMENT.match(requirement)
            if match:
                names.append(match.group(1))
    return names


def find_group(module, prefer=()):
    """Return (group, requirement line) whose install brings `module`, or None.

    Groups in `prefer` are searched first, then GROUPS, then any other group.
    """
    top = module.split('.')[0]
    groups = group_requirements()
    order = list(dict.fromkeys([*prefer, *GROUPS, *groups]))
    installed = _installed_modules()
    for group in (g for g in order if g in groups):
        for line in groups[group]:
            match = _REQUIREMENT.match(line)
            if not match:
                continue
            name, extras = match.group(1), {e.strip() for e in (match.group(2) or '').split(',')}
            if top in _modules_of(name, installed):
                return group, line
            for dependency in _dependencies(name, extras):
                if top in _modules_of(dependency, installed):
                    return group, line
    return None


def install_command(group, requirement):
    """The shell command that installs one group (or, without the source tree, the requirement)."""
    root = requirements_dir()
    if root is None:
        return f"pip install '{requirement}'"
    path = os.path.join(root, f'{group}.txt')
    relative = os.path.relpath(path)
    return f'pip install -r {path if relative.startswith("..") else relative}'


def message(module, command, prefer=()):
    """One line: which module `command` misses and how to install its group; None if unknown."""
    found = find_group(module, prefer)
    if found is None:
        return None
    group, requirement = found
    return (
        f"{command}: the Python module '{module.split('.')[0]}' is missing; it comes with the "
        f'{group} requirements ({requirement}): {install_command(group, requirement)}'
    )


def from_error(error, command, prefer=()):
    """The one line for a ModuleNotFoundError, or None when no group provides the module."""
    return message(error.name, command, prefer) if error.name else None


def check(modules, command, prefer=()):
    """The one line for the first of `modules` that cannot be imported, or None if all can."""
    for module in modules:
        if importlib.util.find_spec(module) is None:
            return message(module, command, prefer) or f"{command}: needs the module '{module}'"
    return None
