"""Maps the top-level folders onto the ``vid2sim`` namespace.

``pipeline/``, ``models/`` and ``datasets/`` install as ``vid2sim.pipeline``,
``vid2sim.models`` and ``vid2sim.datasets`` so that nothing shadows other packages'
``models``/``datasets``. Subpackages are discovered so new ones need no edit here.
"""
from setuptools import find_packages, setup

TOPS = ("pipeline", "models", "datasets")
packages = []
for top in TOPS:
    packages += ["vid2sim." + p for p in find_packages(".", include=[top, top + ".*"])]

setup(
    packages=packages,
    package_dir={"vid2sim." + t: t for t in TOPS},
    package_data={"": ["*.pt", "*.json", "*.obj", "*.urdf"]},
    include_package_data=True,
)
