"""The ctypes declarations match the C compiler's layout of every public struct they mirror."""
import ctypes
import json
import os
import subprocess

import pytest

from qplace import _lib


@pytest.fixture(scope="module")
def layout():
    exe = os.environ.get("QPLACE_ABI_DUMP")
    if not exe:
        pytest.skip("QPLACE_ABI_DUMP is not set (ctest sets it)")
    return json.loads(subprocess.run([exe], check=True, capture_output=True, text=True).stdout)


def test_every_struct_has_the_c_layout(layout):
    assert len(_lib.STRUCTS) >= 20
    for cname, cls in _lib.STRUCTS.items():
        assert layout["%s.__size__" % cname] == ctypes.sizeof(cls), cname
        for f in cls._fields_:
            assert layout["%s.%s" % (cname, f[0])] == getattr(cls, f[0]).offset, (cname, f[0])


def test_the_dump_covers_every_declared_field(layout):
    names = {k.rsplit(".", 1)[0] for k in layout}
    assert names == set(_lib.STRUCTS)
    declared = {"%s.%s" % (c, f[0]) for c, cls in _lib.STRUCTS.items() for f in cls._fields_}
    assert {k for k in layout if not k.endswith("__size__")} == declared
