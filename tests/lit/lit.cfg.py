# lit configuration for fusejit's FileCheck tests (tests/lit/**/*.fj).
import os
import shutil

import lit.formats

config.name = "fusejit"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".fj"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.join(config.fj_src_root, "tests", "lit")
config.test_exec_root = os.path.join(config.fj_obj_root, "tests", "lit")

# Tools first on PATH: the build's fusejit-opt/fusejit-run, then FileCheck/not.
config.environment["PATH"] = os.pathsep.join(
    [config.fj_obj_root, config.fj_llvm_bin, config.environment.get("PATH", os.environ.get("PATH", ""))])
for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "HOME", "TMPDIR"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
# No disk kernel cache shared with other tests or runs (CTest sets "off").
config.environment["FUSEJIT_CACHE_DIR"] = os.environ.get("FUSEJIT_CACHE_DIR", "off")
config.substitutions.append(("%fj_src", config.fj_src_root))
# libdevice (the CUDA toolkit's): feature `libdevice`. Without it the PTX of
# kernels with math needs the explicit approximate math (FUSEJIT_NVPTX_MATH):
# the tests that check the math itself ask for what they need.
libdevice = os.environ.get("FUSEJIT_LIBDEVICE", "/usr/local/cuda/nvvm/libdevice/libdevice.10.bc")
for var in ("FUSEJIT_LIBDEVICE", "FUSEJIT_NVPTX_MATH"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
if os.path.isfile(libdevice):
    config.available_features.add("libdevice")
elif "FUSEJIT_NVPTX_MATH" not in os.environ:
    config.environment["FUSEJIT_NVPTX_MATH"] = "approx"
# The CUDA toolkit's ptxas: feature `ptxas` (REQUIRES: ptxas) and %ptxas.
ptxas = shutil.which("ptxas", path="/usr/local/cuda/bin:" + os.environ.get("PATH", ""))
if ptxas:
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", ptxas))
# The host CPU's vector extensions (/proc/cpuinfo's flags): features `avx2`
# (AVX2 and FMA) and `avx512` (AVX-512 F), for the host_target tests.
# And `intel` (vendor GenuineIntel), for the matmul blocking that
# backend_host/jit.c chooses on Intel cores.
try:
    with open("/proc/cpuinfo") as f:
        info = f.read().splitlines()
except OSError:
    info = []
flags = next((ln.split(":", 1)[1].split() for ln in info if ln.startswith("flags")), [])
if any(ln.startswith("vendor_id") and ln.split(":", 1)[1].strip() == "GenuineIntel" for ln in info):
    config.available_features.add("intel")
if "avx2" in flags and "fma" in flags:
    config.available_features.add("avx2")
if "avx512f" in flags:
    config.available_features.add("avx512")
