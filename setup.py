"""`pip install .` at the repository root: the Python package in python/, with
libfusejit.so built by CMake inside it (python/setup.py does the work; the
metadata is in pyproject.toml beside this file, as in python/pyproject.toml)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "python"))
from setup import OPTIONS, BinaryDistribution, BuildWithLibrary  # noqa: E402  (python/setup.py)
from setuptools import setup  # noqa: E402

os.makedirs("build-python", exist_ok=True)
setup(cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution, package_dir={"": "python"},
      options=OPTIONS)
