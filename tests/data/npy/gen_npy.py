#!/usr/bin/python3
"""Regenerates the .npy/.npz test files in this folder (tests/unit/calib/test_npy.c, test_npz.c).

Run with the system Python that has numpy:  /usr/bin/python3 tests/data/npy/gen_npy.py
Written with numpy 1.24. Files under ok/ must load; files under bad/ must be refused; the
expected values are restated in the C tests, so change both together.

fuzz-*.npy / fuzz-*.npz in this folder are inputs found by fuzz/fuzz_npy.c and are not
generated here; keep them.
"""
import io
import os
import struct
import zipfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OK = os.path.join(HERE, "ok")
BAD = os.path.join(HERE, "bad")

# The values every 6-element test array holds (in C order, shape (2, 3)).
FLOATS = [-1.5, 0.0, 0.25, 3.0, 1024.0, -0.125]
BOOLS = [True, False, True, True, False, False]
COMPLEX = [1 + 2j, -0.5 - 0.25j, 0j, 3j, -4 + 0j, 0.125 + 8j]


def ints(kind, size):
    bits = 8 * size
    if kind == "i":
        return [-(2 ** (bits - 1)), -1, 0, 1, 2, 2 ** (bits - 1) - 1]
    return [0, 1, 2, 3, 2**bits - 2, 2**bits - 1]


def values(code):
    kind, size = code[0], int(code[1:])
    if kind == "f":
        return FLOATS
    if kind == "b":
        return BOOLS
    if kind == "c":
        return COMPLEX
    return ints(kind, size)


CODES = ["f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "b1", "c8", "c16"]


def arr(code, order="<"):
    bo = "|" if code in ("i1", "u1", "b1") else order
    return np.array(values(code), dtype=np.dtype(bo + code)).reshape(2, 3)


def save(folder, name, a, **kw):
    np.save(os.path.join(folder, name), a, **kw)


def write(folder, name, data):
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def npy_bytes(a, version=None):
    b = io.BytesIO()
    np.lib.format.write_array(b, a, version=version, allow_pickle=True)
    return b.getvalue()


def crafted(header, data=b"", version=1, pad=True):
    """An .npy image with a hand-written header dict (numpy would not write these)."""
    h = header.encode("latin1")
    if pad:
        pre = 10 if version == 1 else 12
        h += b" " * ((64 - (pre + len(h) + 1) % 64) % 64) + b"\n"
    if version == 1:
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + data
    return b"\x93NUMPY" + bytes([version, 0]) + struct.pack("<I", len(h)) + h + data


def zip_with(path, members, method=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", method) as z:
        for name, data in members:
            z.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), data, method)


def patch_sizes(path, member, new_size):
    """Rewrites the uncompressed size of `member` in its local and central headers (a lying
    zip). Only for zips without zip64 records."""
    data = bytearray(open(path, "rb").read())
    name = member.encode()
    for sig, name_len_off, size_off, hdr in ((b"PK\x03\x04", 26, 22, 30), (b"PK\x01\x02", 28, 24, 46)):
        pos = data.find(sig)
        while pos >= 0:
            n = struct.unpack_from("<H", data, pos + name_len_off)[0]
            if data[pos + hdr : pos + hdr + n] == name:
                struct.pack_into("<I", data, pos + size_off, new_size)
            pos = data.find(sig, pos + 4)
    open(path, "wb").write(data)


def main():
    os.makedirs(OK, exist_ok=True)
    os.makedirs(BAD, exist_ok=True)

    # ---- accepted ----
    for code in CODES:
        save(OK, "le_" + code + ".npy", arr(code))
        if code not in ("i1", "u1", "b1"):
            save(OK, "be_" + code + ".npy", arr(code, ">"))
    write(OK, "v2_f4.npy", npy_bytes(arr("f4"), (2, 0)))
    write(OK, "v3_i4.npy", npy_bytes(arr("i4"), (3, 0)))
    # Fortran order: 2x3x4 arange, and a big-endian 3x4 int16 (swap and transpose together).
    save(OK, "fortran_f4.npy", np.asfortranarray(np.arange(24, dtype="<f4").reshape(2, 3, 4)))
    save(OK, "fortran_be_i2.npy", np.asfortranarray(np.arange(12, dtype=">i2").reshape(3, 4)))
    save(OK, "scalar_f8.npy", np.array(3.5, dtype="<f8"))
    save(OK, "empty_f4.npy", np.zeros((0, 3), dtype="<f4"))
    save(OK, "empty_mid_i8.npy", np.zeros((2, 0, 5), dtype="<i8"))
    save(OK, "vec_u2.npy", np.arange(5, dtype="<u2"))
    save(OK, "rank8_i1.npy", np.arange(16, dtype="i1").reshape(1, 2, 1, 2, 1, 2, 1, 2))
    save(OK, "nonfinite_f4.npy", np.array([np.nan, np.inf, -np.inf, 1.0, -np.nan, 0.0], "<f4"))
    save(OK, "nonfinite_f2.npy", np.array([np.nan, np.inf, -np.inf, 1.0, 2.0, 0.0], "<f2"))
    # A bool file with bytes other than 0/1 (numpy reads them as True).
    write(OK, "bool_bytes.npy", crafted("{'descr': '|b1', 'fortran_order': False, 'shape': (4,), }",
                                        bytes([0, 1, 2, 255])))
    # Header spellings numpy accepts: other key order, double quotes, no trailing comma,
    # tabs/newlines, no padding at all, old 16-byte alignment.
    f4 = arr("f4").tobytes()
    write(OK, "hdr_order.npy", crafted("{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}", f4))
    write(OK, "hdr_dquote.npy", crafted('{"descr": "<f4", "fortran_order": False, "shape": (2,3)}', f4))
    write(OK, "hdr_ws.npy", crafted("{ 'descr' :'<f4' ,\n\t'fortran_order':False,'shape':( 2 , 3 , ) , }\n", f4))
    write(OK, "hdr_nopad.npy", crafted("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", f4, pad=False))
    h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
    h += " " * ((16 - (10 + len(h) + 1) % 16) % 16) + "\n"
    write(OK, "hdr_align16.npy", crafted(h, f4, pad=False))

    # npz: stored (np.savez), deflated (np.savez_compressed), two members each.
    a, b = arr("f4"), np.arange(4, dtype="<i8")
    np.savez(os.path.join(OK, "stored.npz"), a=a, b=b)
    np.savez_compressed(os.path.join(OK, "deflated.npz"), x=a, idx=b)
    np.savez(os.path.join(OK, "empty.npz"))

    # ---- refused: .npy ----
    save(BAD, "object.npy", np.array([1, "a", None], dtype=object), allow_pickle=True)
    save(BAD, "structured.npy", np.zeros(3, dtype=[("a", "<f4"), ("b", "<i4")]))
    save(BAD, "unicode.npy", np.array(["ab", "c"]))
    save(BAD, "bytes.npy", np.array([b"ab", b"c"]))
    save(BAD, "datetime.npy", np.array(["2020-01-01"], dtype="M8[D]"))
    save(BAD, "void.npy", np.zeros(2, dtype="V2"))
    save(BAD, "longdouble.npy", np.zeros(2, dtype=np.longdouble))
    save(BAD, "rank9.npy", np.zeros((1,) * 9, dtype="<f4"))
    good = npy_bytes(arr("f4"))
    write(BAD, "short_data.npy", good[:-1])
    write(BAD, "long_data.npy", good + b"\0")
    write(BAD, "overflow_shape.npy", crafted("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4611686018427387904), }"))
    write(BAD, "huge_shape.npy", crafted("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }", b"\0" * 16))
    write(BAD, "bad_magic.npy", b"\x93NUMPX" + good[6:])
    write(BAD, "version4.npy", b"\x93NUMPY\x04\x00" + good[8:])
    write(BAD, "header_past_end.npy", good[:8] + struct.pack("<H", 60000) + good[10:])
    write(BAD, "missing_key.npy", crafted("{'descr': '<f4', 'shape': (2, 3), }", f4))
    write(BAD, "extra_key.npy", crafted("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1, }", f4))
    write(BAD, "dup_key.npy", crafted("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f4))
    write(BAD, "shape_not_tuple.npy", crafted("{'descr': '<f4', 'fortran_order': False, 'shape': (6), }", f4))
    write(BAD, "negative_dim.npy", crafted("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, -3), }", f4))
    write(BAD, "no_byteorder.npy", crafted("{'descr': 'f4', 'fortran_order': False, 'shape': (2, 3), }", f4))
    write(BAD, "pipe_f4.npy", crafted("{'descr': '|f4', 'fortran_order': False, 'shape': (2, 3), }", f4))
    write(BAD, "lowercase_bool.npy", crafted("{'descr': '<f4', 'fortran_order': false, 'shape': (2, 3), }", f4))
    write(BAD, "trailing_garbage.npy", crafted("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } x", f4))
    write(BAD, "unterminated.npy", crafted("{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3), }", f4))

    # ---- refused: .npz ----
    zip_with(os.path.join(BAD, "dotdot.npz"), [("../x.npy", good)])
    zip_with(os.path.join(BAD, "absolute.npz"), [("/x.npy", good)])
    zip_with(os.path.join(BAD, "folder.npz"), [("d/x.npy", good)])
    zip_with(os.path.join(BAD, "not_npy.npz"), [("x.npy", good), ("readme.txt", b"hello")])
    zip_with(os.path.join(BAD, "bzip2.npz"), [("x.npy", good)], zipfile.ZIP_BZIP2)
    with zipfile.ZipFile(os.path.join(BAD, "duplicate.npz"), "w") as z:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            z.writestr("x.npy", good)
            z.writestr("x.npy", npy_bytes(arr("i4")))
    np.savez(os.path.join(BAD, "object_member.npz"), ok=arr("f4"), obj=np.array([None], dtype=object))
    # Lying sizes: a deflated member whose headers claim 1 byte more / 1 byte fewer than it
    # holds, and one claiming 100 MB from a few hundred compressed bytes.
    for name, delta in (("lie_bigger.npz", 1), ("lie_smaller.npz", -1)):
        p = os.path.join(BAD, name)
        zip_with(p, [("x.npy", good)], zipfile.ZIP_DEFLATED)
        patch_sizes(p, "x.npy", len(good) + delta)
    # Sizes that agree with the member's own .npy header, but the deflate stream holds 8 bytes
    # fewer / more: only bounding the actual read catches these.
    for name, shape, real in (("lie_stream_short.npz", "(2, 4)", 24), ("lie_stream_long.npz", "(2, 2)", 24)):
        hdr = crafted("{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % shape)
        p = os.path.join(BAD, name)
        zip_with(p, [("x.npy", hdr + f4[:real])], zipfile.ZIP_DEFLATED)
        patch_sizes(p, "x.npy", len(hdr) + (32 if shape == "(2, 4)" else 16))
    # Declares 5 bytes, fewer than any .npy preamble, but holds a whole file.
    p = os.path.join(BAD, "lie_tiny.npz")
    zip_with(p, [("x.npy", good)], zipfile.ZIP_DEFLATED)
    patch_sizes(p, "x.npy", 5)
    write(BAD, "empty_file.npz", b"")
    p = os.path.join(BAD, "lie_huge.npz")
    zip_with(p, [("x.npy", good)], zipfile.ZIP_DEFLATED)
    patch_sizes(p, "x.npy", 100_000_000)
    # A stored member with a wrong CRC.
    p = os.path.join(BAD, "bad_crc.npz")
    zip_with(p, [("x.npy", good)])
    data = bytearray(open(p, "rb").read())
    data[-(22 + 46 + 5) - 8] ^= 0xFF  # a data byte: 8th from the end of the member
    open(p, "wb").write(data)


if __name__ == "__main__":
    main()
