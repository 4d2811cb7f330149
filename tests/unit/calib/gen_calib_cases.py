#!/usr/bin/python3
"""Writes calib_cases.h: calibration inputs and the ranges ONNX Runtime's histogram calibrators
(as ModelOpt drives them) would compute for them.

This is an independent numpy re-statement of the behaviour described in
shared/reference/modelopt-onnx-ptq.md §5.4 and of ORT's percentile calibrator, written for the
tests (not a copy of ORT): per-batch symmetric histograms that grow by whole old-width bins per
side, the KL threshold search with float32 smoothing and scipy-style normalised entropy, and the
|x| histogram with its cumulative-sum percentile. Data are regenerated with another seed until
every value sits clearly inside a bin, so float32/float64 edge rounding cannot matter.

    /usr/bin/python3 tests/unit/calib/gen_calib_cases.py > tests/unit/calib/calib_cases.h
"""
import math
import sys

import numpy as np

F32 = np.float32


# ---- signed histogram (entropy) -----------------------------------------------------------
def collect_value(state, data, n_bins=128):
    data = data.astype(F32).ravel()
    t = float(max(abs(float(data.min())), abs(float(data.max()))))
    if state is None:
        return {"hist": np.histogram(data, n_bins, range=(-t, t))[0].astype(np.int64), "T": t,
                "min": float(data.min()), "max": float(data.max())}
    hist, T = state["hist"], state["T"]
    if t <= T:
        h = np.histogram(data, len(hist), range=(-T, T))[0] + hist
    else:
        stride = 2 * T / len(hist)
        k = int((t - T) // stride + 1)
        n = len(hist) + 2 * k
        T = k * stride + T
        h = np.histogram(data, n, range=(-T, T))[0]
        h[k:n - k] += hist
    return {"hist": h.astype(np.int64), "T": T, "min": min(state["min"], float(data.min())),
            "max": max(state["max"], float(data.max()))}


def np_sum32(a):
    return F32(np.sum(a.astype(F32)))


def smooth(p, eps=0.0001):
    is_zero = (p == 0)
    nz = int(is_zero.sum())
    nnz = p.size - nz
    if nnz == 0:
        return None
    eps1 = eps * nz / nnz
    assert eps1 < 1.0
    h = p.astype(F32)
    h += np.where(is_zero, F32(eps), F32(-eps1)).astype(F32)
    return h


def entropy32(p, q):
    p = p / np_sum32(p)
    q = q / np_sum32(q)
    p = p.astype(F32)
    q = q.astype(F32)
    pd, qd = p.astype(np.float64), q.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where((pd > 0) & (qd > 0), pd * np.log(pd / qd),
                     np.where((pd == 0) & (qd >= 0), 0.0, np.inf))
    return float(np_sum32(v.astype(F32)))


def entropy_window(hist, nq=128):
    nb = hist.size
    z = nb // 2
    best = None
    for i in range(nq // 2, z + 1):
        s, e = z - i, min(z + i + 1, nb)
        sl = hist[s:e].copy()
        p = sl.copy()
        p[0] += hist[:s].sum()
        p[-1] += hist[e:].sum()
        nonzero = p != 0
        m = sl.size // nq
        qb = np.array([sl[g * m:(g + 1) * m].sum() for g in range(nq)], dtype=np.int64)
        qb[-1] += sl[nq * m:].sum()
        q = np.zeros(p.size, dtype=np.int64)
        for g in range(nq):
            norm = nonzero[g * m:(g + 1) * m].sum()
            if norm:
                q[g * m:(g + 1) * m] = int(qb[g] / norm)
        ps, qs = smooth(p), smooth(q)
        kl = math.inf if ps is None or qs is None else entropy32(ps, qs)
        if best is None or kl < best[0]:
            best = (kl, s, e)
    return best


def hist_edge(T, n, i):
    return T if i == n else i * (2 * T / n) - T


# ---- |x| histogram (percentile) ---------------------------------------------------------
def collect_abs(state, data, n_bins):
    data = data.astype(F32).ravel()
    mn, mx = float(data.min()), float(data.max())
    a = np.abs(data).astype(np.float64)
    if state is None:
        lo, hi = float(a.min()), float(a.max())
        w = (hi - lo) / n_bins
        edges = lo + w * np.arange(n_bins + 1)
        edges[-1] = hi
        return {"hist": np.histogram(a, bins=edges)[0].astype(np.int64), "lo": lo, "w": w,
                "min": mn, "max": mx, "below": 0}
    hist, lo, w = state["hist"], state["lo"], state["w"]
    last = lo + w * len(hist)
    n = len(hist)
    if a.max() > last:
        n += int(math.ceil((a.max() - last) / w))
    edges = lo + w * np.arange(n + 1)
    h = np.histogram(a, bins=edges)[0].astype(np.int64)
    h[:len(hist)] += hist
    return {"hist": h, "lo": lo, "w": w, "min": min(state["min"], mn),
            "max": max(state["max"], mx), "below": state["below"] + int((a < lo).sum())}


def percentile_range(st, pct):
    hist = st["hist"]
    cdf = np.cumsum(hist / hist.sum())
    idx = int(np.searchsorted(cdf, pct / 100.0))
    e = st["lo"] + idx * st["w"]
    lo, hi = -e, e
    lo = max(lo, st["min"])
    hi = min(hi, st["max"])
    return idx, lo, hi


# ---- edge-safety check ------------------------------------------------------------------
def clear_of_edges(x, lo, hi, n):
    f = (x.astype(np.float64) - lo) / (hi - lo) * n
    frac = f - np.floor(f)
    return bool(np.all((frac > 1e-3) & (frac < 1 - 1e-3)) or False)


def make_entropy_case(seed):
    rng = np.random.default_rng(seed)
    b1 = rng.standard_normal(600).astype(F32)
    b2 = (rng.standard_t(3, 900) * 1.2).astype(F32)
    b3 = (rng.standard_normal(700) * 0.8).astype(F32)
    st = None
    for b in (b1, b2, b3):
        prev = st
        st = collect_value(st, b)
        # each batch's values must sit clearly inside a bin of the range they are binned on
        if not clear_of_edges(b[np.abs(b) < st["T"] * 0.999999], -st["T"], st["T"],
                              len(st["hist"])):
            return None
        if prev is not None and len(st["hist"]) == len(prev["hist"]):
            pass
    return (b1, b2, b3), st


def make_percentile_case(seed, n_bins):
    rng = np.random.default_rng(seed)
    b1 = (rng.standard_normal(500) + 0.5).astype(F32)
    b2 = (rng.standard_normal(700) * 2.5).astype(F32)
    st = None
    for b in (b1, b2):
        st = collect_abs(st, b, n_bins)
        a = np.abs(b.astype(np.float64))
        inside = a[(a > st["lo"]) & (a < st["lo"] + st["w"] * len(st["hist"]) * 0.999999)]
        if not clear_of_edges(inside, st["lo"], st["lo"] + st["w"] * len(st["hist"]),
                              len(st["hist"])):
            return None
    return (b1, b2), st


def carr(name, a, ctype="float", fmt="{:.9g}f"):
    body = ", ".join(fmt.format(float(v)) if ctype != "uint64_t" else str(int(v)) for v in a)
    return f"static const {ctype} {name}[{len(a)}] = {{{body}}};\n"


def main():
    out = sys.stdout
    out.write("/* Generated by gen_calib_cases.py; do not edit. */\n#include <stdint.h>\n\n")
    for seed in range(1, 1000):
        r = make_entropy_case(seed)
        if r:
            break
    (b1, b2, b3), st = r
    kl, s, e = entropy_window(st["hist"])
    T, n = st["T"], len(st["hist"])
    lo = max(hist_edge(T, n, s), st["min"])
    hi = min(hist_edge(T, n, e), st["max"])
    out.write(f"/* entropy case, seed {seed} */\n")
    out.write(carr("ent_b1", b1) + carr("ent_b2", b2) + carr("ent_b3", b3))
    out.write(carr("ent_hist", st["hist"], "uint64_t"))
    out.write(f"#define ENT_NBINS {n}\n#define ENT_T {T!r}\n#define ENT_START {s}\n"
              f"#define ENT_END {e}\n#define ENT_KL {kl!r}\n#define ENT_LO {lo!r}\n"
              f"#define ENT_HI {hi!r}\n\n")
    for seed in range(1, 1000):
        r = make_percentile_case(seed, 64)
        if r:
            break
    (p1, p2), st = r
    out.write(f"/* percentile case (64 initial bins), seed {seed} */\n")
    out.write(carr("pct_b1", p1) + carr("pct_b2", p2))
    out.write(carr("pct_hist", st["hist"], "uint64_t"))
    out.write(f"#define PCT_NBINS {len(st['hist'])}\n#define PCT_LO {st['lo']!r}\n"
              f"#define PCT_W {st['w']!r}\n#define PCT_BELOW {st['below']}\n")
    for name, pct in (("99", 99.0), ("99999", 99.999), ("90", 90.0)):
        idx, lo, hi = percentile_range(st, pct)
        out.write(f"#define PCT_{name}_IDX {idx}\n#define PCT_{name}_LO {lo!r}\n"
                  f"#define PCT_{name}_HI {hi!r}\n")


if __name__ == "__main__":
    main()
