"""Build and install loco_policy (ament_python): packages, share/ data and console scripts."""

from glob import glob
import os

from setuptools import find_packages, setup

PACKAGE = 'loco_policy'
HERE = os.path.dirname(os.path.realpath(__file__))  # the source tree, also under colcon's symlinks


def requirements(group):
    """Read the pinned requirements of one group from requirements/<group>.txt."""
    with open(os.path.join(HERE, 'requirements', f'{group}.txt')) as handle:
        lines = (line.split('#')[0].strip() for line in handle)
        return [line for line in lines if line]


def share(*patterns):
    """Files matching the patterns, relative to the package root, that exist."""
    return sorted(path for pattern in patterns for path in glob(pattern) if os.path.isfile(path))


setup(
    name=PACKAGE,
    version='0.1.0',
    packages=find_packages(include=['loco_policy', 'loco_policy.*', 'loco_train', 'loco_train.*']),
    package_data={'loco_policy': ['description/*.xml', 'description/*.urdf', 'policies/*.onnx']},
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + PACKAGE]),
        ('share/' + PACKAGE, ['package.xml']),
        ('share/' + PACKAGE + '/launch', share('launch/*.launch.py')),
        ('share/' + PACKAGE + '/config', share('config/*')),
        (
            'share/' + PACKAGE + '/description',
            share('loco_policy/description/*.xml', 'loco_policy/description/*.urdf'),
        ),
        ('share/' + PACKAGE + '/policies', share('loco_policy/policies/*.onnx')),
    ],
    # Dependencies are pinned in requirements/*.txt, installed by the Makefile (or rosdep on a
    # robot PC); none here, so `colcon build` never tries to download anything.
    install_requires=[],
    extras_require={
        group: requirements(group) for group in ('deploy', 'sim', 'train', 'tools', 'test')
    },
    zip_safe=True,
    maintainer='loco_policy maintainers',
    maintainer_email='maintainers@loco-policy.dev',
    description='ANYmal locomotion: differentiable-simulation training, ROS 2 deployment',
    license='BSD-3-Clause',
    entry_points={
        'console_scripts': [
            'loco-train = loco_train.cli:main',
            'loco-launch = loco_policy.bringup.launcher:main',
            'loco-bag-recover = loco_policy.tools.bag_recover:main',
            'policy_node = loco_policy.nodes.policy_node:main',
            'sim_robot = loco_policy.nodes.sim_robot:main',
            'recorder = loco_policy.nodes.recorder:main',
            'command_source = loco_policy.nodes.command_source:main',
            'excitation = loco_policy.nodes.excitation:main',
            'robot_description = loco_policy.nodes.robot_description:main',
            'sac_finetune = loco_train.nodes.sac_finetune:main',
        ],
    },
)
