"""The PEP 517 build backend of the qplace package: standard library only, no PyPI.

pip builds a package in an isolated environment into which it installs the backend's
requirements from PyPI; a machine without PyPI access cannot do that for setuptools or flit, so
this backend lives beside pyproject.toml (backend-path) and requires nothing. It writes:
  - a wheel: the qplace/ package, libqplace.so.0 bundled into it (from $QPLACE_LIBRARY, else
    ../build/libqplace.so.0, else built with CMake into ../build-python first), and the
    dist-info (METADATA from pyproject.toml's [project], WHEEL, RECORD);
  - an editable wheel (pip install -e): a .pth file pointing at this folder; the package then
    loads the library from $QPLACE_LIBRARY or the dynamic linker's path, else ../build;
  - an sdist: this folder as a tarball.
"""

import base64
import hashlib
import os
import shutil
import subprocess
import sysconfig
import tarfile
import tomllib
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def _project():
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _metadata():
    p = _project()
    lines = ["Metadata-Version: 2.1", "Name: %s" % p["name"], "Version: %s" % p["version"],
             "Summary: %s" % p["description"], "Requires-Python: %s" % p["requires-python"],
             "License: %s" % p["license"]["text"]]
    lines += ["Requires-Dist: %s" % d for d in p.get("dependencies", [])]
    with open(os.path.join(HERE, p["readme"]), encoding="utf-8") as f:
        lines += ["Description-Content-Type: text/markdown", "", f.read()]
    return "\n".join(lines) + "\n"


def _tag(pure):
    if pure:
        return "py3-none-any"
    return "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")


def _library():
    """The libqplace.so.0 to bundle: $QPLACE_LIBRARY, ../build's, or one built now."""
    env = os.environ.get("QPLACE_LIBRARY")
    if env:
        if not os.path.isfile(env):
            raise RuntimeError("QPLACE_LIBRARY=%s: no such file" % env)
        return os.path.realpath(env)
    for d in ("build", "build-python"):
        p = os.path.join(REPO, d, "libqplace.so.0")
        if os.path.isfile(p):
            return os.path.realpath(p)
    if not os.path.isfile(os.path.join(REPO, "CMakeLists.txt")):
        raise RuntimeError("no libqplace.so.0: set QPLACE_LIBRARY to the library to bundle")
    out = os.path.join(REPO, "build-python")
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    try:
        subprocess.run(["cmake", "-S", REPO, "-B", out, "-DCMAKE_BUILD_TYPE=Release"] + gen,
                       check=True)
        subprocess.run(["cmake", "--build", out, "--target", "qplace_shared"], check=True)
    except (OSError, subprocess.CalledProcessError) as ex:
        raise RuntimeError("building libqplace with CMake failed (%s); run "
                           "`bash scripts/setup.sh` for the build dependencies, or build it "
                           "and set QPLACE_LIBRARY" % ex) from None
    return os.path.realpath(os.path.join(out, "libqplace.so.0"))


class _Wheel:
    def __init__(self, directory, pure):
        p = _project()
        self.dist = "%s-%s" % (p["name"], p["version"])
        self.tag = _tag(pure)
        self.name = "%s-%s.whl" % (self.dist, self.tag)
        self.path = os.path.join(directory, self.name)
        self.zip = zipfile.ZipFile(self.path, "w", zipfile.ZIP_DEFLATED)
        self.record = []

    def add(self, arcname, data):
        if isinstance(data, str):
            data = data.encode()
        info = zipfile.ZipInfo(arcname, date_time=(2026, 1, 1, 0, 0, 0))
        info.external_attr = (0o755 if arcname.endswith(".so.0") else 0o644) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append("%s,sha256=%s,%d" % (arcname, digest, len(data)))

    def close(self):
        di = self.dist + ".dist-info"
        self.add(di + "/METADATA", _metadata())
        self.add(di + "/WHEEL", "Wheel-Version: 1.0\nGenerator: qplace _qplace_build\n"
                                "Root-Is-Purelib: false\nTag: %s\n" % self.tag)
        self.add(di + "/top_level.txt", "qplace\n")
        self.record.append(di + "/RECORD,,")
        self.zip.writestr(di + "/RECORD", "\n".join(self.record) + "\n")
        self.zip.close()
        return self.name


def get_requires_for_build_wheel(config_settings=None):
    return []


get_requires_for_build_sdist = get_requires_for_build_editable = get_requires_for_build_wheel


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    p = _project()
    di = os.path.join(metadata_directory, "%s-%s.dist-info" % (p["name"], p["version"]))
    os.makedirs(di, exist_ok=True)
    with open(os.path.join(di, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    return os.path.basename(di)


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    lib = _library()
    w = _Wheel(wheel_directory, pure=False)
    pkg = os.path.join(HERE, "qplace")
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py"):
            with open(os.path.join(pkg, name), "rb") as f:
                w.add("qplace/" + name, f.read())
    with open(lib, "rb") as f:
        w.add("qplace/libqplace.so.0", f.read())
    return w.close()


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    w = _Wheel(wheel_directory, pure=True)
    w.add("qplace_editable.pth", HERE + "\n")
    return w.close()


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = "%s-%s" % (p["name"], p["version"])
    out = os.path.join(sdist_directory, base + ".tar.gz")
    with tarfile.open(out, "w:gz") as t:
        for name in ("pyproject.toml", "README.md", "_qplace_build.py", "qplace"):
            t.add(os.path.join(HERE, name), arcname=base + "/" + name,
                  filter=lambda i: None if "__pycache__" in i.name else i)
    return os.path.basename(out)
