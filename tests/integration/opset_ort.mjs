// Opset conversion checked in ONNX Runtime: each model is converted to opset 19 and 21 by
// opset_convert_tool (tests/opset/), and the original and converted models must give the same
// outputs on the same inputs: |a - b| <= atol + rtol * |b| for floats (rtol 1e-5, atol 1e-6),
// exact for integers and booleans. Graph optimizations are off so that each model is run as
// written.
//
//   node opset_ort.mjs --tool BIN --ort DIR --tmp DIR --data tests/data/opset
//   node opset_ort.mjs --tool BIN --ort DIR --tmp DIR --paddleocr .cache/models
//
// --data: every NAME.onnx with a NAME.inputs.json (written by tests/data/opset/gen_models.py).
// --paddleocr: the three PaddleOCR models, fed deterministic pseudo-random images.
// Exits 0 when every comparison passes, 1 otherwise (each failure is printed).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const RTOL = 1e-5;
const ATOL = 1e-6;
const TARGETS = [19, 21];

function parseArgs(argv) {
    const a = {};
    for (let i = 0; i < argv.length; i += 2) {
        if (!argv[i].startsWith('--') || i + 1 >= argv.length) throw new Error(`bad argument ${argv[i]}`);
        a[argv[i].slice(2)] = argv[i + 1];
    }
    for (const k of ['tool', 'ort', 'tmp']) if (!a[k]) throw new Error(`--${k} is required`);
    if (!a.data && !a.paddleocr) throw new Error('--data or --paddleocr is required');
    return a;
}

const args = parseArgs(process.argv.slice(2));
const ort = createRequire(import.meta.url)(path.resolve(args.ort));
fs.mkdirSync(args.tmp, { recursive: true });

function tensorFromJson(t) {
    const n = t.data.length;
    switch (t.dtype) {
    case 'float32': return new ort.Tensor('float32', Float32Array.from(t.data), t.dims);
    case 'int64': return new ort.Tensor('int64', BigInt64Array.from(t.data.map(BigInt)), t.dims);
    case 'bool': return new ort.Tensor('bool', Uint8Array.from(t.data.map((v) => (v ? 1 : 0))), t.dims);
    default: throw new Error(`input dtype ${t.dtype} (${n} values) not handled`);
    }
}

// Deterministic values in [-1, 1) (xorshift32), so runs are reproducible.
function pseudoRandom(n, seed) {
    const out = new Float32Array(n);
    let s = seed >>> 0 || 1;
    for (let i = 0; i < n; i++) {
        s ^= s << 13; s >>>= 0;
        s ^= s >>> 17;
        s ^= s << 5; s >>>= 0;
        out[i] = (s / 4294967296) * 2 - 1;
    }
    return out;
}

async function run(file, feeds) {
    const session = await ort.InferenceSession.create(file, {
        graphOptimizationLevel: 'disabled', intraOpNumThreads: 1, interOpNumThreads: 1,
    });
    const out = await session.run(feeds);
    const names = session.outputNames;
    if (session.release) await session.release();
    return { out, names };
}

// Returns a list of problems (empty when equal).
function compare(ref, got, label) {
    const problems = [];
    for (const name of ref.names) {
        const a = ref.out[name], b = got.out[name];
        if (!b) { problems.push(`${label}: output '${name}' is missing`); continue; }
        if (a.type !== b.type) problems.push(`${label}: output '${name}' type ${b.type}, expected ${a.type}`);
        if (a.dims.join('x') !== b.dims.join('x')) {
            problems.push(`${label}: output '${name}' shape ${b.dims.join('x')}, expected ${a.dims.join('x')}`);
            continue;
        }
        let bad = 0, first = -1, worst = 0;
        const isFloat = a.type === 'float32' || a.type === 'float64';
        for (let i = 0; i < a.data.length; i++) {
            const x = b.data[i], y = a.data[i];
            let ok;
            if (isFloat) {
                ok = (Number.isNaN(x) && Number.isNaN(y)) || x === y || Math.abs(x - y) <= ATOL + RTOL * Math.abs(y);
                if (!ok) worst = Math.max(worst, Math.abs(x - y));
            } else {
                ok = x === y;
            }
            if (!ok) { bad++; if (first < 0) first = i; }
        }
        if (bad) {
            problems.push(`${label}: output '${name}': ${bad} of ${a.data.length} values differ ` +
                          `(first at ${first}: ${b.data[first]} vs ${a.data[first]}` +
                          `${isFloat ? `, max abs diff ${worst}` : ''})`);
        }
    }
    return problems;
}

function convert(src, target) {
    const dst = path.join(args.tmp, `${path.basename(src, '.onnx')}.opset${target}.onnx`);
    try {
        execFileSync(args.tool, [src, dst, String(target)], { stdio: ['ignore', 'pipe', 'pipe'] });
    } catch (e) {
        throw new Error(`conversion to ${target} failed: ${String(e.stderr || e.message).trim()}`);
    }
    return dst;
}

async function check(src, feeds) {
    const label0 = path.basename(src);
    const problems = [];
    let ref;
    try {
        ref = await run(src, feeds);
    } catch (e) {
        return [`${label0}: the original does not run in ORT: ${e.message}`];
    }
    for (const target of TARGETS) {
        const label = `${label0} -> opset ${target}`;
        try {
            const dst = convert(src, target);
            const got = await run(dst, feeds);
            problems.push(...compare(ref, got, label));
        } catch (e) {
            problems.push(`${label}: ${e.message}`);
        }
    }
    console.log(`${problems.length ? 'FAIL' : 'ok  '} ${label0} (${ref.names.length} outputs x ${TARGETS.length} targets)`);
    return problems;
}

const cases = [];
if (args.data) {
    for (const f of fs.readdirSync(args.data).sort()) {
        if (!f.endsWith('.onnx')) continue;
        const json = path.join(args.data, f.replace(/\.onnx$/, '.inputs.json'));
        if (!fs.existsSync(json)) continue;
        const raw = JSON.parse(fs.readFileSync(json, 'utf8'));
        const feeds = {};
        for (const [k, t] of Object.entries(raw)) feeds[k] = tensorFromJson(t);
        cases.push({ file: path.join(args.data, f), feeds });
    }
}
if (args.paddleocr) {
    const models = [
        ['ch_PP-OCRv4_det_infer.onnx', [1, 3, 96, 128]],
        ['ch_PP-OCRv4_rec_infer.onnx', [1, 3, 48, 160]],
        ['ch_ppocr_mobile_v2.0_cls_infer.onnx', [1, 3, 48, 192]],
    ];
    for (const [name, dims] of models) {
        const file = path.join(args.paddleocr, name);
        if (!fs.existsSync(file)) { console.error(`missing ${file}`); process.exit(1); }
        const n = dims.reduce((p, d) => p * d, 1);
        cases.push({ file, feeds: { x: new ort.Tensor('float32', pseudoRandom(n, 12345), dims) } });
    }
}
if (!cases.length) { console.error('no models found'); process.exit(1); }

let failures = 0;
for (const c of cases) {
    const problems = await check(c.file, c.feeds);
    for (const p of problems) console.error(`  ${p}`);
    failures += problems.length;
}
console.log(`${cases.length} models, ${failures} problems`);
process.exit(failures ? 1 : 0);
