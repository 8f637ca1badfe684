"""Builds libfusejit.so with CMake while pip builds the package, and puts it
inside the package (fusejit/libfusejit.so), so `import fusejit` needs no
FUSEJIT_LIB. Used by `python3 -m pip install ./python` and, through the
repository root's pyproject.toml, by `pip install .` at the root. Needs what
the library needs to build: CMake, a C compiler and LLVM 19
(scripts/install-deps.sh installs them on Debian 12). Metadata lives in
pyproject.toml."""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
# setuptools' own build folder, apart from CMake's build/ of the checkout
OPTIONS = {"build": {"build_base": "build-python"}, "egg_info": {"egg_base": "build-python"}}


def source_root():
    """The fusejit checkout this package sits in (its CMakeLists.txt and header)."""
    for d in (os.path.dirname(HERE), HERE):
        if os.path.isfile(os.path.join(d, "CMakeLists.txt")) and \
                os.path.isfile(os.path.join(d, "include", "fusejit", "fusejit.h")):
            return d
    raise SystemExit("fusejit: the package is built from a fusejit checkout (python/ inside it): "
                     "no CMakeLists.txt and include/fusejit/fusejit.h found next to %s" % HERE)


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        if shutil.which("cmake") is None:
            raise SystemExit("fusejit: building the package needs CMake, a C compiler and LLVM 19 "
                             "(scripts/install-deps.sh installs them)")
        root = source_root()
        build = os.path.join(os.path.abspath(self.get_finalized_command("build").build_temp), "fusejit-cmake")
        jobs = str(os.cpu_count() or 2)
        subprocess.check_call(["cmake", "-S", root, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DFUSEJIT_TESTS=OFF"])
        subprocess.check_call(["cmake", "--build", build, "--target", "fusejit", "-j", jobs])
        lib = os.path.join(build, "libfusejit.so")
        dest = os.path.join(self.build_lib, "fusejit")
        os.makedirs(dest, exist_ok=True)
        shutil.copy2(lib, os.path.join(dest, "libfusejit.so"))


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True  # a platform wheel: it carries libfusejit.so


if __name__ == "__main__":
    os.makedirs("build-python", exist_ok=True)
    setup(cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution, options=OPTIONS)
