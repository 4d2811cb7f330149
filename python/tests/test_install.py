"""`pip install ./python` works offline in a fresh virtual environment (the in-tree backend
needs nothing from PyPI) and the installed package runs on its bundled library."""
import os
import subprocess
import sys
import zipfile

import pytest

PY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(cmd, env=None, cwd=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    assert p.returncode == 0, "%s\n%s\n%s" % (cmd, p.stdout[-2000:], p.stderr[-4000:])
    return p.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    d = tmp_path_factory.mktemp("venv")
    r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(d)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("python3 -m venv is not available (python3-venv): %s" % r.stderr[-300:])
    return d


def test_pip_install_offline_and_import(venv, cls_model, tmp_path):
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    sh([str(venv / "bin" / "pip"), "install", PY], env=env)
    # The installed package, from another folder, without QPLACE_LIBRARY: the bundled library.
    env.pop("QPLACE_LIBRARY", None)
    env.pop("PYTHONPATH", None)
    code = ("import qplace, numpy as np, sys; print(qplace.library_path); "
            "s = qplace.Session(sys.argv[1]); "
            "o = s.run({'x': np.zeros((1, 3, 48, 192), np.float32)}); "
            "print(sorted(o), o['softmax_0.tmp_0'].shape)")
    out = sh([str(venv / "bin" / "python"), "-c", code, cls_model], env=env, cwd=str(tmp_path))
    lib, rest = out.strip().splitlines()
    assert lib.startswith(str(venv)) and lib.endswith("qplace/libqplace.so.0")
    assert rest == "['softmax_0.tmp_0'] (1, 2)"
    sh([str(venv / "bin" / "pip"), "uninstall", "-y", "qplace"], env=env)


def backend():
    """python/_qplace_build.py, the package's build backend, as a module."""
    sys.path.insert(0, PY)
    try:
        import _qplace_build
    finally:
        sys.path.remove(PY)
    return _qplace_build


def test_wheel_contents(tmp_path):
    name = backend().build_wheel(str(tmp_path))
    with zipfile.ZipFile(tmp_path / name) as z:
        names = set(z.namelist())
        record = z.read("qplace-0.1.0.dist-info/RECORD").decode()
        meta = z.read("qplace-0.1.0.dist-info/METADATA").decode()
    assert {"qplace/__init__.py", "qplace/_lib.py", "qplace/libqplace.so.0"} <= names
    assert all(n in record for n in names)
    assert "Requires-Dist: numpy" in meta and "Name: qplace" in meta
    assert name.startswith("qplace-0.1.0-py3-none-linux_")


def test_editable_wheel_and_sdist(tmp_path):
    b = backend()
    name = b.build_editable(str(tmp_path))
    with zipfile.ZipFile(tmp_path / name) as z:
        assert z.read("qplace_editable.pth").decode().strip() == PY
    assert name.endswith("py3-none-any.whl")
    import tarfile
    with tarfile.open(tmp_path / b.build_sdist(str(tmp_path))) as t:
        names = t.getnames()
    assert "qplace-0.1.0/pyproject.toml" in names and "qplace-0.1.0/qplace/_lib.py" in names
    assert not any("__pycache__" in n for n in names)
