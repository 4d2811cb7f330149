#!/usr/bin/python3
"""Runs table-driven CLI cases against qplace: run_cases.py QPLACE MODELS_DIR CASES_FILE.

The ModelOpt command lines (modelopt_cli/*.cases) and the bad-input catalogue
(catalogue/*.cases) are written in it. A cases file is blocks separated by blank lines ('#'
lines are comments), one case each:

    case: --dq_only takes no value (argparse store_true)
    run: quantize --onnx_path $CLS --dq_only False --output_path $T/q.onnx
    exit: 1
    stderr: unexpected argument 'False'
    absent: $T/q.onnx

Keys: `run` (qplace's arguments, split like a shell line; required), `exit` (the expected
status; required), `stderr` / `stdout` (a regex that must match; repeatable), `not_stderr`
(a regex that must not match), `exists` / `absent` (a path), `absent_glob` (no file matches the
pattern: temporary files left behind), `fsize` (a file size limit in bytes for the run, with
SIGXFSZ ignored, so that writing more fails with EFBIG as on a full disk), `setup` (a shell line
run before the command, which must exit 0; repeatable), `check` (a shell line run after the
command with the same variables, which must exit 0; repeatable). Variables: $Q (qplace), $M
(the real models), $CLS / $REC / $DET (PaddleOCR models), $DATA (tests/integration/
calibrate_data), $T (an empty folder per case), $PY (/usr/bin/python3), $HERE (the cases
file's folder).
A generated model a cases file names ($M/generated/resnet50.onnx, .../vit_tiny.onnx) is made
first with tests/models/gen_<name>.py, as the models/ort tests make it (bench/lib.sh).
Exit 0 when every case holds; each failure prints the case, the check and the output.
"""
import glob
import os
import re
import resource
import shlex
import signal
import subprocess
import sys
import tempfile

KEYS = {"case", "run", "exit", "stderr", "stdout", "not_stderr", "exists", "absent",
        "absent_glob", "fsize", "setup", "check"}


def parse(path):
    cases, cur = [], {}
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if line.startswith("#"):
            continue
        if not line.strip():
            if cur:
                cases.append(cur)
            cur = {}
            continue
        key, sep, value = line.partition(":")
        if not sep or key.strip() not in KEYS:
            sys.exit(f"{path}:{n}: expected 'key: value' with key in {sorted(KEYS)}")
        cur.setdefault(key.strip(), []).append(value.strip())
        cur.setdefault("_line", n)
    if cur:
        cases.append(cur)
    for c in cases:
        if "run" not in c or "exit" not in c:
            sys.exit(f"{path}:{c['_line']}: a case needs 'run' and 'exit'")
        for k in ("run", "exit", "fsize", "case"):
            if len(c.get(k, [])) > 1:
                sys.exit(f"{path}:{c['_line']}: '{k}' is given twice in one case")
    return cases


def run_case(c, env):
    t = tempfile.mkdtemp(prefix="qp-cases-")
    env = dict(env, T=t)

    def sub(s):
        return re.sub(r"\$(\w+)", lambda m: env.get(m.group(1), m.group(0)), s)

    problems = []
    for cmd in c.get("setup", []):
        r = subprocess.run(sub(cmd), shell=True, capture_output=True, text=True, cwd=t,
                           env=dict(os.environ, **env))
        if r.returncode != 0:
            problems.append(f"setup failed: {cmd}\n{r.stdout}{r.stderr}")
    limit = int(c["fsize"][0]) if "fsize" in c else None

    def fault():  # in the child: writes beyond `limit` bytes fail with EFBIG, no signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    argv = [env["Q"]] + [sub(a) for a in shlex.split(c["run"][0])]
    p = subprocess.run(argv, capture_output=True, text=True, cwd=t, env=dict(os.environ, **env),
                       preexec_fn=fault if limit is not None else None)
    want = int(c["exit"][0])
    if p.returncode != want:
        problems.append(f"exit {p.returncode}, expected {want}")
    for rx in c.get("stderr", []):
        if not re.search(sub(rx), p.stderr):
            problems.append(f"stderr lacks /{rx}/")
    for rx in c.get("not_stderr", []):
        if re.search(sub(rx), p.stderr):
            problems.append(f"stderr has /{rx}/")
    for rx in c.get("stdout", []):
        if not re.search(sub(rx), p.stdout):
            problems.append(f"stdout lacks /{rx}/")
    for f in c.get("exists", []):
        if not os.path.exists(sub(f)):
            problems.append(f"missing {f}")
    for f in c.get("absent", []):
        if os.path.exists(sub(f)):
            problems.append(f"should not exist: {f}")
    for pat in c.get("absent_glob", []):
        left = glob.glob(sub(pat))
        if left:
            problems.append(f"left behind: {', '.join(left)}")
    for cmd in c.get("check", []):
        r = subprocess.run(sub(cmd), shell=True, capture_output=True, text=True, cwd=t,
                           env=dict(os.environ, **env))
        if r.returncode != 0:
            problems.append(f"check failed: {cmd}\n{r.stdout}{r.stderr}")
    subprocess.run(["rm", "-rf", t])
    return problems, p


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    q, models, cases_file = sys.argv[1:]
    here = os.path.dirname(os.path.abspath(__file__))
    cases_dir = os.path.dirname(os.path.abspath(cases_file))
    env = {
        "Q": os.path.abspath(q),
        "M": models,
        "CLS": os.path.join(models, "ch_ppocr_mobile_v2.0_cls_infer.onnx"),
        "REC": os.path.join(models, "ch_PP-OCRv4_rec_infer.onnx"),
        "DET": os.path.join(models, "ch_PP-OCRv4_det_infer.onnx"),
        "DATA": os.path.join(here, "calibrate_data"),
        "PY": "/usr/bin/python3",
        "HERE": cases_dir,
    }
    if not os.path.exists(env["CLS"]):
        if os.environ.get("QP_REQUIRE_REAL_MODELS") == "1":
            sys.exit(f"run_cases: real models missing in {models} (run scripts/setup.sh)")
        print(f"skip: no real models in {models}")
        sys.exit(77)
    failed = 0
    cases = parse(cases_file)
    root = os.path.normpath(os.path.join(here, "..", ".."))
    text = open(cases_file, encoding="utf-8").read()
    for name in ("resnet50", "vit_tiny"):
        out = os.path.join(models, "generated", name + ".onnx")
        if f"generated/{name}.onnx" not in text:
            continue
        os.makedirs(os.path.dirname(out), exist_ok=True)
        gen = os.path.join(root, "tests", "models", f"gen_{name}.py")
        r = subprocess.run(["bash", "-c", f'. "{root}/bench/lib.sh" && generate "$0" "$1"', gen,
                            out])
        if r.returncode != 0:
            sys.exit(f"run_cases: generating {out} failed")
    for c in cases:
        problems, p = run_case(c, env)
        name = c.get("case", [f"line {c['_line']}"])[0]
        if problems:
            failed += 1
            print(f"FAIL {name} ({cases_file}:{c['_line']})\n  " + "\n  ".join(problems))
            print(f"  stdout: {p.stdout[-2000:]}\n  stderr: {p.stderr[-2000:]}")
        else:
            print(f"ok   {name}")
    print(f"{len(cases) - failed}/{len(cases)} cases hold")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
