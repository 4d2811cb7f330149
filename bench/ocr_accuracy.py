#!/usr/bin/python3
"""Accuracy of quantized PaddleOCR models on rendered text lines with known labels.

    ocr_accuracy.py render --out DIR [--n_eval N] [--n_calib N] [--seed S] [--width W]
    ocr_accuracy.py bench --qplace Q --models DIR --npm DIR --work DIR [--threads T] ...
    ocr_accuracy.py check --qplace Q --models DIR --npm DIR --work DIR   (the quick ctest)

The text (real strings, nothing invented):
  - English: runs of 1 to 6 consecutive words from Debian's license texts in
    /usr/share/common-licenses (ENGLISH_SOURCES below);
  - Chinese: phrases from the zh_CN translations of Debian's essential tools
    (/usr/share/locale/zh_CN/LC_MESSAGES/{apt,dpkg,coreutils,bash,tar}.mo, CHINESE_SOURCES):
    the runs of dictionary characters (Chinese with any digits or Latin letters among them),
    printf directives removed, 2 to 14 characters with at least two Chinese ones.
Every label character is in the recognizer's dictionary; calibration and evaluation lines
are distinct strings (checked).

Rendering (PIL with Debian's fonts-dejavu and fonts-wqy-microhei; every random choice from
numpy's generator seeded with (seed, line number), so a set depends only on its arguments):
one of seven DejaVu faces for English, WenQuanYi Micro Hei (two faces) for Chinese, 16..40
pixels, grey text on a lighter grey ground, margins of a few pixels, Gaussian blur of radius
0.3..1.0 on 70% of lines, Gaussian noise of sigma 1..6. The line is trimmed (words, or
characters for Chinese) until it fits the recognizer's width at height 48. Half the lines,
chosen per line, are also given to the classifier rotated by 180 degrees.

Preprocessing, as PaddleOCR's: resize to height 48 keeping the aspect ratio (width at most
the fixed width; bilinear), (x / 255 - 0.5) / 0.5, CHW, padded with zeros to the fixed width:
48 x W (default 320) for rec, 48 x 192 for cls. The lines are grey, so channel order does not
matter.

Metrics: rec -- greedy CTC decode (argmax per time step, repeats merged, blank 0 dropped;
class i is line i of ppocr_keys_v1.txt, the last class a space), exact match against the
label and character error rate (edit distance summed over lines / label characters summed);
cls -- accuracy of label 0 vs 180. For each configuration (the float model or a `qplace
quantize` output) both engines run the same file: qplace (`qplace run`, a batch of --batch
lines per run) and ONNX Runtime (bench/ocr_ort.js); "agreement with ORT" is the fraction of
lines whose decode (label) equals ORT's on that file.
"""
import argparse
import gettext
import hashlib
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time

import numpy as np

ENGLISH_SOURCES = [f"/usr/share/common-licenses/{n}" for n in
                   ("GPL-3", "Apache-2.0", "LGPL-2.1", "MPL-2.0", "Artistic", "GFDL-1.3")]
CHINESE_SOURCES = [f"/usr/share/locale/zh_CN/LC_MESSAGES/{n}.mo" for n in
                   ("apt", "dpkg", "coreutils", "bash", "tar")]
DEJAVU = "/usr/share/fonts/truetype/dejavu/"
ENGLISH_FONTS = [(DEJAVU + f, 0) for f in
                 ("DejaVuSans.ttf", "DejaVuSerif.ttf", "DejaVuSansMono.ttf", "DejaVuSans-Bold.ttf",
                  "DejaVuSansCondensed.ttf", "DejaVuSerif-Italic.ttf", "DejaVuSans-Oblique.ttf")]
CHINESE_FONTS = [("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc", 0),
                 ("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc", 1)]
REC_MODEL = "ch_PP-OCRv4_rec_infer.onnx"
CLS_MODEL = "ch_ppocr_mobile_v2.0_cls_infer.onnx"
DICT = "ppocr_keys_v1.txt"
HEIGHT, CLS_WIDTH = 48, 192
# Rows of the report: NAME -> `qplace quantize` flags (besides data, threads and output).
CONFIGS = {
    "float": None,
    "default": ["--high_precision_dtype", "fp32"],
    "fp16": [],
    "auto": ["--calibration_method", "auto", "--high_precision_dtype", "fp32"],
    "auto16": ["--calibration_method", "auto"],
    "max": ["--calibration_method", "max", "--high_precision_dtype", "fp32"],
    "percentile": ["--calibration_method", "percentile", "--high_precision_dtype", "fp32"],
}
CONFIG_NOTES = {
    "float": "the float model",
    "default": "`qplace quantize` defaults (entropy), --high_precision_dtype fp32",
    "fp16": "`qplace quantize` defaults (entropy, high precision fp16)",
    "auto": "--calibration_method auto, fp32",
    "auto16": "--calibration_method auto, high precision fp16",
    "max": "--calibration_method max, fp32",
    "percentile": "--calibration_method percentile (99.999), fp32",
}


def missing_prerequisites(models=None):
    """What rendering (and, given the models folder, running) needs that is absent."""
    out = []
    try:
        import PIL  # noqa: F401
    except ImportError:
        out.append("python3-pil")
    for p, _ in ENGLISH_FONTS + CHINESE_FONTS:
        if not os.path.exists(p):
            out.append(p)
    out += [p for p in ENGLISH_SOURCES + CHINESE_SOURCES if not os.path.exists(p)]
    if models:
        out += [os.path.join(models, f) for f in (REC_MODEL, CLS_MODEL, DICT)
                if not os.path.exists(os.path.join(models, f))]
    return sorted(set(out))


def load_dictionary(models):
    """The recognizer's classes: index 0 the CTC blank, i the dictionary's line i, last ' '."""
    with open(os.path.join(models, DICT), encoding="utf-8") as f:
        chars = [c.rstrip("\r") for c in f.read().split("\n")]
    while chars and chars[-1] == "":
        chars.pop()
    return ["<blank>"] + chars + [" "]


# ---- the strings -----------------------------------------------------------------------------
def english_words(charset):
    words = []
    for path in ENGLISH_SOURCES:
        with open(path, encoding="utf-8") as f:
            for w in f.read().split():
                w = "".join(c for c in w if c in charset)
                if w:
                    words.append(w)
    return words


def chinese_phrases(charset):
    """Runs of dictionary characters from the translations, in file order, unique."""
    directive = re.compile(r"%[-+ #0-9.$'*]*[hlLqjzt]*[a-zA-Z%]")
    cjk = re.compile(r"[\u4e00-\u9fff]")
    seen = {}
    for path in CHINESE_SOURCES:
        with open(path, "rb") as f:
            catalog = gettext.GNUTranslations(f)._catalog
        for msg in catalog.values():
            run = ""
            for c in directive.sub(" ", msg) + " ":
                if c in charset and c != " ":
                    run += c
                    continue
                if 2 <= len(run) and len(cjk.findall(run)) >= 2:
                    seen.setdefault(run, None)
                run = ""
    return list(seen)


# ---- rendering -------------------------------------------------------------------------------
_FONTS = {}


def font(path, index, size):
    from PIL import ImageFont
    key = (path, index, size)
    if key not in _FONTS:
        _FONTS[key] = ImageFont.truetype(path, size, index=index)
    return _FONTS[key]


def draw_spec(rng, kind, words, phrases):
    """One line's text and look; the text may still be trimmed to fit."""
    faces = ENGLISH_FONTS if kind == "en" else CHINESE_FONTS
    spec = {"kind": kind, "face": faces[int(rng.integers(len(faces)))],
            "size": int(rng.integers(16, 41)), "mx": int(rng.integers(2, 11)),
            "mt": int(rng.integers(2, 8)), "mb": int(rng.integers(2, 8)),
            "bg": int(rng.integers(180, 256)), "fg": int(rng.integers(0, 90)),
            "blur": float(rng.uniform(0.3, 1.0)) if rng.random() < 0.7 else 0.0,
            "noise": float(rng.uniform(1.0, 6.0)), "rotated": bool(rng.random() < 0.5)}
    if kind == "en":
        k = int(rng.integers(1, 7))
        at = int(rng.integers(0, len(words) - k))
        spec["tokens"] = words[at:at + k]
    else:
        p = phrases[int(rng.integers(len(phrases)))]
        n = min(len(p), int(rng.integers(2, 15)))
        at = int(rng.integers(0, len(p) - n + 1))
        spec["tokens"] = list(p[at:at + n])
    return spec


def fit(spec, width):
    """Drops trailing tokens until the line's width at height 48 is at most `width`; the
    label, or None when no prefix fits."""
    f = font(*spec["face"], spec["size"])
    ascent, descent = f.getmetrics()
    h = ascent + descent + spec["mt"] + spec["mb"]
    sep = " " if spec["kind"] == "en" else ""
    toks = list(spec["tokens"])
    while toks:
        text = sep.join(toks)
        w = f.getlength(text) + 2 * spec["mx"]
        if math.ceil(HEIGHT * w / h) <= width:
            return text
        toks.pop()
    return None


def render(spec, text, rng):
    """The line as a grey uint8 image [h, w] (rotated by 180 degrees is the caller's)."""
    from PIL import Image, ImageDraw, ImageFilter
    f = font(*spec["face"], spec["size"])
    ascent, descent = f.getmetrics()
    left = f.getbbox(text)[0]
    w = int(math.ceil(f.getlength(text))) + 2 * spec["mx"]
    h = ascent + descent + spec["mt"] + spec["mb"]
    img = Image.new("L", (w, h), spec["bg"])
    ImageDraw.Draw(img).text((spec["mx"] - min(left, 0), spec["mt"]), text, fill=spec["fg"],
                             font=f)
    if spec["blur"] > 0:
        img = img.filter(ImageFilter.GaussianBlur(spec["blur"]))
    a = np.asarray(img, dtype=np.float32) + rng.normal(0.0, spec["noise"], (h, w))
    return np.clip(np.rint(a), 0, 255).astype(np.uint8)


def preprocess(gray, width):
    """PaddleOCR's resize_norm_img: [3, 48, width] float32, zero padded on the right."""
    from PIL import Image
    h, w = gray.shape
    rw = min(width, int(math.ceil(HEIGHT * w / h)))
    img = Image.fromarray(gray).resize((rw, HEIGHT), Image.BILINEAR)
    x = np.zeros((3, HEIGHT, width), np.float32)
    x[:, :, :rw] = (np.asarray(img, np.float32) / 255.0 - 0.5) / 0.5
    return x


def make_lines(n_total, seed, width, charset):
    """n_total distinct labelled lines: (label, spec, gray image)."""
    words, phrases = english_words(charset), chinese_phrases(charset)
    if len(words) < 1000 or len(phrases) < 200:
        raise SystemExit(f"ocr_accuracy: only {len(words)} words and {len(phrases)} phrases "
                         f"in {ENGLISH_SOURCES} / {CHINESE_SOURCES}")
    lines, labels = [], set()
    k = 0
    while len(lines) < n_total:
        rng = np.random.default_rng([seed, k])
        k += 1
        spec = draw_spec(rng, "en" if rng.random() < 0.6 else "zh", words, phrases)
        text = fit(spec, width)
        if text is None or text in labels:
            continue
        labels.add(text)
        lines.append((text, spec, render(spec, text, rng)))
        if k > 50 * n_total:
            raise SystemExit("ocr_accuracy: too few distinct strings")
    return lines


def build_sets(n_eval, n_calib, seed, width, models):
    """The evaluation and calibration sets: arrays, labels and a digest of both."""
    charset = set(load_dictionary(models)[1:])
    lines = make_lines(n_eval + n_calib, seed, width, charset)
    order = np.random.default_rng([seed, 1 << 30]).permutation(len(lines))
    sets = {}
    for name, idx in (("calib", order[:n_calib]), ("eval", order[n_calib:])):
        chosen = [lines[i] for i in sorted(idx)]
        rec = np.stack([preprocess(g, width) for _, _, g in chosen])
        cls = np.stack([preprocess(np.rot90(g, 2) if s["rotated"] else g, CLS_WIDTH)
                        for _, s, g in chosen])
        sets[name] = {"rec": rec, "cls": cls, "labels": [t for t, _, _ in chosen],
                      "rotated": [s["rotated"] for _, s, _ in chosen],
                      "fonts": [f"{os.path.basename(s['face'][0])}#{s['face'][1]}@{s['size']}"
                                for _, s, _ in chosen]}
    if set(sets["eval"]["labels"]) & set(sets["calib"]["labels"]):
        raise SystemExit("ocr_accuracy: calibration and evaluation strings overlap")
    h = hashlib.sha256()
    for name in ("calib", "eval"):
        s = sets[name]
        h.update(s["rec"].tobytes() + s["cls"].tobytes())
        h.update(json.dumps([s["labels"], s["rotated"]], ensure_ascii=False).encode())
    return sets, h.hexdigest()


def write_sets(sets, digest, out, seed, width):
    os.makedirs(out, exist_ok=True)
    for name, s in sets.items():
        for model in ("rec", "cls"):
            np.savez(os.path.join(out, f"{model}_{name}.npz"), x=s[model])
    meta = {"seed": seed, "width": width, "digest": digest,
            "english_sources": ENGLISH_SOURCES, "chinese_sources": CHINESE_SOURCES,
            "sets": {n: {k: s[k] for k in ("labels", "rotated", "fonts")} for n, s in sets.items()}}
    with open(os.path.join(out, "lines.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, ensure_ascii=False, indent=1)


# ---- engines ---------------------------------------------------------------------------------
def sh(cmd, log=None):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if log:
        with open(log, "w") as f:
            f.write(" ".join(shlex.quote(c) for c in cmd) + "\n" + p.stdout + p.stderr)
    if p.returncode:
        raise SystemExit(f"ocr_accuracy: exit {p.returncode}: {shlex.join(cmd)}\n"
                         f"{p.stdout}{p.stderr}")
    return p.stdout


def run_qplace(a, model, x, flags, work):
    """Argmax over the last axis of the model's output, `qplace run` on batches of a.batch."""
    out = []
    for n0 in range(0, len(x), a.batch):
        inp, res = os.path.join(work, "run_in.npz"), os.path.join(work, "run_out.npz")
        np.savez(inp, x=x[n0:n0 + a.batch])
        sh([a.qplace, "run", model, "--inputs", inp, "--output", res, "--threads",
            str(a.threads)] + flags)
        with np.load(res) as z:
            out.append(np.argmax(z[z.files[0]], axis=-1).astype(np.int32))
    return np.concatenate(out).reshape(len(x), -1)


def run_ort(a, model, x, work):
    inp, res = os.path.join(work, "ort_in.bin"), os.path.join(work, "ort_out.bin")
    x.astype("<f4").tofile(inp)
    js = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ocr_ort.js")
    info = json.loads(sh(["node", js, "--npm", a.npm, "--model", model, "--input", inp,
                          "--dims", ",".join(map(str, x.shape)), "--batch", str(a.batch),
                          "--threads", str(a.threads), "--out", res]))
    return np.fromfile(res, "<i4").reshape(len(x), -1), info["version"]


# ---- metrics ---------------------------------------------------------------------------------
def ctc_decode(steps, classes):
    out, prev = [], 0
    for c in steps:
        if c != prev and c != 0:
            out.append(classes[c])
        prev = c
    return "".join(out)


def edit_distance(a, b):
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def rec_metrics(steps, labels, classes, ref=None, float_steps=None):
    texts = [ctc_decode(s, classes) for s in steps]
    m = {"n": len(labels),
         "exact_match": float(np.mean([t == l for t, l in zip(texts, labels)])),
         "cer": sum(edit_distance(t, l) for t, l in zip(texts, labels)) / sum(map(len, labels))}
    if ref is not None:
        m["agree_ort"] = float(np.mean([t == ctc_decode(r, classes) for t, r in zip(texts, ref)]))
    if float_steps is not None:
        m["step_agree_float"] = float(np.mean(steps == float_steps))
    return m, texts


def cls_metrics(pred, rotated, ref=None):
    pred = pred[:, 0]
    m = {"n": len(rotated), "accuracy": float(np.mean(pred == np.array(rotated, np.int32)))}
    if ref is not None:
        m["agree_ort"] = float(np.mean(pred == ref[:, 0]))
    return m


# ---- the benchmark ---------------------------------------------------------------------------
def parse_configs(spec):
    """QUANT_CONFIGS: names from CONFIGS, or NAME=FLAGS for a row of your own; entries split
    on ';' when there is one, else on whitespace."""
    out = []
    for e in (spec.split(";") if ";" in spec else spec.split()):
        e = e.strip()
        if not e:
            continue
        name, eq, flags = e.partition("=")
        name = name.strip()
        if eq:
            out.append((name, shlex.split(flags), flags.strip()))
        elif name in CONFIGS:
            out.append((name, CONFIGS[name], CONFIG_NOTES[name]))
        else:
            raise SystemExit(f"ocr_accuracy: QUANT_CONFIGS: unknown configuration '{name}' "
                             f"(known: {' '.join(CONFIGS)}; or NAME=FLAGS)")
    return out


def engines(a):
    """(label, `qplace run` flags) per qplace column: one per QP_INT8_MODES value."""
    extra = shlex.split(a.run_flags)
    modes = a.int8_modes.split()
    if not modes:
        return [("qplace", extra)]
    return [(f"qplace --int8 {m}", ["--int8", m] + extra) for m in modes]


def quantize(a, name, flags, model, calib, work):
    out = os.path.join(work, f"{os.path.splitext(os.path.basename(model))[0]}.{name}.onnx")
    t0 = time.time()
    sh([a.qplace, "quantize", "--onnx_path", model, "--calibration_data_path", calib,
        "--threads", str(a.threads), "--output_path", out] + flags, log=out + ".log")
    return out, time.time() - t0


def jittered(model, seed, rel, out):
    """A copy of Q/DQ model `model` whose activation scales (the scale of every QuantizeLinear of
    a computed tensor, shared with its DequantizeLinear) are each multiplied by a factor drawn
    uniformly from [1 - rel, 1 + rel]: how much the accuracy owes to where the rounding ties of
    one calibration happen to fall."""
    import onnx  # python3-onnx; only this option needs it
    from onnx import numpy_helper
    m = onnx.load(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    made = {o for n in g.node if n.op_type == "Constant" for o in n.output}
    names = sorted({n.input[1] for n in g.node if n.op_type == "QuantizeLinear"
                    and n.input[0] not in inits and n.input[0] not in made
                    and n.input[1] in inits})
    rng = np.random.default_rng(seed)
    for name in names:
        t = inits[name]
        v = numpy_helper.to_array(t)
        f = rng.uniform(1 - rel, 1 + rel)
        t.CopyFrom(numpy_helper.from_array((v.astype(np.float64) * f).astype(v.dtype), name))
    onnx.save(m, out)
    return len(names)


def jitter_stats(a, kind, model, x, labels, rotated, classes, work):
    """Accuracy of a.jitter jittered copies of `model` on `qplace run --int8 off`."""
    vals = []
    for k in range(a.jitter):
        path = os.path.join(work, f"jitter_{kind}.onnx")
        jittered(model, 1000 + k, a.jitter_rel, path)
        got = run_qplace(a, path, x, ["--int8", "off"], work)
        m = rec_metrics(got, labels, classes)[0]["exact_match"] if kind == "rec" else \
            cls_metrics(got, rotated)["accuracy"]
        vals.append(m)
    return {"n": a.jitter, "rel": a.jitter_rel, "mean": float(np.mean(vals)),
            "min": float(min(vals)), "max": float(max(vals))}


def line_correct(kind, got, labels, rotated, classes):
    """Per evaluation line: 1 where the engine's reading is right (rec: the decode equals the
    label; cls: the predicted orientation is the true one)."""
    if kind == "rec":
        return np.array([ctc_decode(s, classes) == l for s, l in zip(got, labels)], np.int64)
    return (got[:, 0] == np.array(rotated, np.int32)).astype(np.int64)


def paired(kind, config, a_name, a_got, b_name, b_got, correct):
    """Engine A against engine B on the same lines of the same file: the difference of their
    accuracies in points with a 95% confidence interval for paired proportions (only the
    lines one engine reads right and the other wrong carry information: b and c below), and
    for rec the share of time steps whose argmax differs."""
    ca, cb = correct[a_name], correct[b_name]
    n = len(ca)
    b, c = int(np.sum((ca == 1) & (cb == 0))), int(np.sum((ca == 0) & (cb == 1)))
    d = (b - c) / n
    half = 1.96 * math.sqrt(max(b + c - (b - c) ** 2 / n, 0.0)) / n
    out = {"model": kind, "config": config, "a": a_name, "b": b_name, "n": n,
           "only_a": b, "only_b": c, "diff": d, "ci95": [d - half, d + half]}
    if kind == "rec":
        out["step_differ"] = float(np.mean(a_got != b_got))
    return out


def bench_model(a, kind, sets, classes, work, configs):
    """Rows of one model (rec or cls) for every configuration and engine, and the paired
    comparisons of the engines on each quantized file."""
    x, labels = sets["eval"][kind], sets["eval"]["labels"]
    rotated = sets["eval"]["rotated"]
    base = os.path.join(a.models, REC_MODEL if kind == "rec" else CLS_MODEL)
    calib = os.path.join(a.data, f"{kind}_calib.npz")
    rows, pairs, float_steps = [], [], None
    for name, flags, note in configs:
        model, qtime = (base, 0.0) if flags is None else quantize(a, name, flags, base, calib,
                                                                  work)
        t0 = time.time()
        ref, ort_version = run_ort(a, model, x, work)
        row = {"model": kind, "config": name, "flags": note, "quantize_s": round(qtime, 1)}
        if kind == "rec":
            if flags is None:
                float_steps = ref
            m, _ = rec_metrics(ref, labels, classes, None, float_steps)
        else:
            m = cls_metrics(ref, rotated)
        rows.append(dict(row, engine=f"ORT {ort_version}", run_s=round(time.time() - t0, 1), **m))
        outs = {"ORT": ref}
        for label, run_flags in engines(a):
            t0 = time.time()
            got = run_qplace(a, model, x, run_flags, work)
            if kind == "rec":
                m, _ = rec_metrics(got, labels, classes, ref, float_steps)
            else:
                m = cls_metrics(got, rotated, ref)
            rows.append(dict(row, engine=label, run_s=round(time.time() - t0, 1), **m))
            outs[label] = got
        if flags is not None:
            correct = {k: line_correct(kind, v, labels, rotated, classes) for k, v in outs.items()}
            names = list(outs)[1:] + ["ORT"]
            pairs += [paired(kind, name, p, outs[p], q, outs[q], correct)
                      for i, p in enumerate(names) for q in names[i + 1:]]
        if a.jitter and flags is not None:
            rows[-1]["jitter"] = jitter_stats(a, kind, model, x, labels, rotated, classes, work)
        print(f"ocr_accuracy: {kind} {name} done", file=sys.stderr, flush=True)
    return rows, pairs


def cpu_isa():
    name, flags = "unknown", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and name == "unknown":
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    isa = ("AVX-512" + (" VNNI" if "avx512_vnni" in flags else "") if "avx512f" in flags
           else "AVX2" + (" VNNI" if "avx_vnni" in flags else "") if "avx2" in flags else "SSE")
    if os.environ.get("ONEDNN_MAX_CPU_ISA"):
        isa += f" (ONEDNN_MAX_CPU_ISA={os.environ['ONEDNN_MAX_CPU_ISA']})"
    return name, isa


def pct(v):
    return "-" if v is None else f"{100 * v:.1f}%"


def points(v):
    return f"{100 * v:+.2f}"


def steps(v):
    return "-" if v is None else f"{100 * v:.2f}%"


def markdown(meta, rows, pairs):
    out = [f"PaddleOCR accuracy on {meta['n_eval']} rendered evaluation lines ({meta['n_calib']} "
           f"calibration lines, seed {meta['seed']}, width {meta['width']}, digest "
           f"{meta['digest'][:12]}); {meta['cpu']}, {meta['isa']}, {meta['threads']} threads; "
           f"{meta['seconds']:.0f} s.", ""]
    out += ["rec (PP-OCRv4, greedy CTC):", "",
            "| config | engine | exact match | CER | agreement with ORT |", "|---|---|---|---|---|"]
    out += [f"| {r['config']} | {r['engine']} | {pct(r['exact_match'])} | {pct(r['cer'])} | "
            f"{pct(r.get('agree_ort'))} |" for r in rows if r["model"] == "rec"]
    out += ["", "cls (0 vs 180 degrees):", "",
            "| config | engine | accuracy | agreement with ORT |", "|---|---|---|---|"]
    out += [f"| {r['config']} | {r['engine']} | {pct(r['accuracy'])} | {pct(r.get('agree_ort'))} |"
            for r in rows if r["model"] == "cls"]
    if pairs:
        out += ["", "Engines paired on the same file and lines (difference A - B in points, its 95% "
                "confidence interval; lines only A / only B reads right; rec: time steps whose "
                "argmax differs):", "",
                "| model | config | A | B | A - B | 95% CI | only A | only B | steps differ |",
                "|---|---|---|---|---|---|---|---|---|"]
        out += [f"| {p['model']} | {p['config']} | {p['a']} | {p['b']} | {points(p['diff'])} | "
                f"{points(p['ci95'][0])} .. {points(p['ci95'][1])} | {p['only_a']} | "
                f"{p['only_b']} | {steps(p.get('step_differ'))} |" for p in pairs]
    jit = [r for r in rows if "jitter" in r]
    if jit:
        j = jit[0]["jitter"]
        out += ["", f"Under scale jitter ({j['n']} copies, every activation scale times a factor "
                f"within 1 +- {j['rel']:g}; `qplace run --int8 off`):", "",
                "| model | config | mean | min | max |", "|---|---|---|---|---|"]
        out += [f"| {r['model']} | {r['config']} | {pct(r['jitter']['mean'])} | "
                f"{pct(r['jitter']['min'])} | {pct(r['jitter']['max'])} |" for r in jit]
    notes = dict.fromkeys((r["config"], r["flags"]) for r in rows)
    out += ["", "configs: " + "; ".join(f"{c}: {n}" for c, n in notes)]
    return "\n".join(out) + "\n"


def cmd_bench(a):
    t0 = time.time()
    configs = parse_configs(a.configs)
    miss = missing_prerequisites(a.models)
    if miss:
        raise SystemExit(f"ocr_accuracy: missing {', '.join(miss)} (bash scripts/setup.sh)")
    sets, digest = build_sets(a.n_eval, a.n_calib, a.seed, a.width, a.models)
    a.data = os.path.join(a.work, "data")
    write_sets(sets, digest, a.data, a.seed, a.width)
    classes = load_dictionary(a.models)
    work = os.path.join(a.work, "models")
    os.makedirs(work, exist_ok=True)
    rows, pairs = [], []
    for kind in a.which.split(","):
        r, p = bench_model(a, kind, sets, classes, work, configs)
        rows, pairs = rows + r, pairs + p
    name, isa = cpu_isa()
    meta = {"n_eval": a.n_eval, "n_calib": a.n_calib, "seed": a.seed, "width": a.width,
            "digest": digest, "cpu": name, "isa": isa, "threads": a.threads, "batch": a.batch,
            "int8_modes": a.int8_modes, "qplace_run_flags": a.run_flags,
            "english_sources": ENGLISH_SOURCES, "chinese_sources": CHINESE_SOURCES,
            "seconds": round(time.time() - t0, 1)}
    md = markdown(meta, rows, pairs)
    with open(os.path.join(a.work, "ocr_accuracy.md"), "w") as f:
        f.write(md)
    with open(os.path.join(a.work, "ocr_accuracy.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows, "pairs": pairs}, f, indent=1)
    print(md, end="")
    print(f"written: {a.work}/ocr_accuracy.md, {a.work}/ocr_accuracy.json")


def cmd_render(a):
    sets, digest = build_sets(a.n_eval, a.n_calib, a.seed, a.width, a.models)
    write_sets(sets, digest, a.out, a.seed, a.width)
    print(digest)


def cmd_check(a):
    """The quick ctest: the renderer is deterministic (two processes with different hash
    seeds give the same digest, another seed a different one), calibration and evaluation
    strings are disjoint, and the float models read the lines: rec exact match >= 80% and cls
    accuracy >= 90% in qplace's engine, agreeing with ONNX Runtime on >= 95% of lines."""
    miss = missing_prerequisites(a.models)
    node_ok = os.path.exists(os.path.join(a.npm, "node_modules", "onnxruntime-node"))
    if miss or not node_ok:
        print(f"missing {', '.join(miss) or 'onnxruntime-node'} (bash scripts/setup.sh)")
        sys.exit(1 if os.environ.get("QP_REQUIRE_REAL_MODELS") == "1" else 77)
    fails = []
    digests = []
    for hs, seed in (("1", a.seed), ("2", a.seed), ("1", a.seed + 1)):
        out = os.path.join(a.work, f"render-{len(digests)}")
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "render", "--out", out,
                            "--n_eval", str(a.n_eval), "--n_calib", str(a.n_calib), "--seed",
                            str(seed), "--width", str(a.width), "--models", a.models],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONHASHSEED=hs))
        if p.returncode:
            raise SystemExit(f"render failed: {p.stdout}{p.stderr}")
        digests.append(p.stdout.strip())
    if digests[0] != digests[1]:
        fails.append(f"render is not deterministic: {digests[0]} vs {digests[1]}")
    if digests[0] == digests[2]:
        fails.append("seeds 1 and 2 rendered the same lines")
    a.data = os.path.join(a.work, "render-0")
    with open(os.path.join(a.data, "lines.json"), encoding="utf-8") as f:
        meta = json.load(f)["sets"]
    ev, ca = meta["eval"]["labels"], meta["calib"]["labels"]
    if len(ev) != a.n_eval or len(ca) != a.n_calib or len(set(ev) | set(ca)) != len(ev) + len(ca):
        fails.append(f"sets: {len(ev)} eval, {len(ca)} calib, {len(set(ev) | set(ca))} distinct")
    classes = load_dictionary(a.models)
    x = {k: np.load(os.path.join(a.data, f"{k}_eval.npz"))["x"] for k in ("rec", "cls")}
    ref, _ = run_ort(a, os.path.join(a.models, REC_MODEL), x["rec"], a.work)
    got = run_qplace(a, os.path.join(a.models, REC_MODEL), x["rec"], [], a.work)
    m, texts = rec_metrics(got, ev, classes, ref)
    print(f"rec float, qplace: {m}")
    if m["exact_match"] < 0.8 or m["agree_ort"] < 0.95:
        fails.append(f"rec: {m}; read as {list(zip(ev, texts))}")
    cref, _ = run_ort(a, os.path.join(a.models, CLS_MODEL), x["cls"], a.work)
    cgot = run_qplace(a, os.path.join(a.models, CLS_MODEL), x["cls"], [], a.work)
    c = cls_metrics(cgot, meta["eval"]["rotated"], cref)
    print(f"cls float, qplace: {c}")
    if c["accuracy"] < 0.9 or c["agree_ort"] < 0.95:
        fails.append(f"cls: {c}")
    for f in fails:
        print(f"FAIL: {f}")
    print("ok" if not fails else f"{len(fails)} failed")
    sys.exit(1 if fails else 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("render", "bench", "check"):
        p = sub.add_parser(name)
        p.add_argument("--models", default=os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "..", ".cache", "models"))
        p.add_argument("--seed", type=int, default=1)
        p.add_argument("--width", type=int, default=320)
        quick = name == "check"
        p.add_argument("--n_eval", type=int, default=20 if quick else 400)
        p.add_argument("--n_calib", type=int, default=10 if quick else 100)
        if name == "render":
            p.add_argument("--out", required=True)
            continue
        p.add_argument("--qplace", required=True)
        p.add_argument("--npm", required=True)
        p.add_argument("--work", required=True)
        p.add_argument("--threads", type=int, default=2)
        p.add_argument("--batch", type=int, default=50)
        p.add_argument("--configs", default=" ".join(CONFIGS))
        p.add_argument("--int8_modes", default="")
        p.add_argument("--run_flags", default="")
        p.add_argument("--which", default="rec,cls")
        p.add_argument("--jitter", type=int, default=0)
        p.add_argument("--jitter_rel", type=float, default=5e-4)
    a = ap.parse_args()
    if a.cmd != "render":
        os.makedirs(a.work, exist_ok=True)
    {"render": cmd_render, "bench": cmd_bench, "check": cmd_check}[a.cmd](a)


if __name__ == "__main__":
    main()
