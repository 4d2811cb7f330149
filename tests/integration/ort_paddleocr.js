// ort_paddleocr.js --npm DIR --models DIR --resave BIN --tmp DIR
//
// ONNX Runtime check of qplace's save path on the real PaddleOCR models: each model is re-saved
// by qplace (BIN IN OUT: load + save), then the original and the re-saved model run in ONNX
// Runtime (onnxruntime-node from DIR/node_modules) on the same deterministic, real-looking input
// (a white page with dark text-like strokes, normalised as PaddleOCR does), and every output must
// be bit-identical. Missing models or runtime: skipped (exit 77) unless QP_REQUIRE_REAL_MODELS=1,
// then failed. Closes with "N passed, N failed".
'use strict';
const fs = require('fs');
const path = require('path');
const {spawnSync} = require('child_process');
const {makeInput} = require('./lib/testdata.js');

const EXIT_SKIP = 77;

function parseArgs(argv) {
    const args = {};
    for (let k = 0; k < argv.length; k += 2) {
        if (!argv[k].startsWith('--') || k + 1 >= argv.length) {
            throw new Error(`bad argument ${argv[k]}`);
        }
        args[argv[k].slice(2)] = argv[k + 1];
    }
    for (const need of ['npm', 'models', 'resave', 'tmp']) {
        if (!args[need]) throw new Error(`--${need} is required`);
    }
    return args;
}

const MODELS = [
    {file: 'ch_PP-OCRv4_det_infer.onnx', h: 640, w: 640, kind: 'det'},
    {file: 'ch_PP-OCRv4_rec_infer.onnx', h: 48, w: 320, kind: 'rec'},
    {file: 'ch_ppocr_mobile_v2.0_cls_infer.onnx', h: 48, w: 192, kind: 'cls'},
];

function describe(kind, out) {
    const d = out.data;
    if (kind === 'det') {
        let text = 0;
        for (let k = 0; k < d.length; k++) if (d[k] > 0.3) text++;
        return `probability map ${out.dims.join('x')}, ${(100 * text / d.length).toFixed(1)}% text pixels`;
    }
    if (kind === 'rec') {
        const [, steps, classes] = out.dims;
        let chars = 0, prev = -1;
        for (let t = 0; t < steps; t++) {
            let best = 0;
            for (let c = 1; c < classes; c++) if (d[t * classes + c] > d[t * classes + best]) best = c;
            if (best !== 0 && best !== prev) chars++;
            prev = best;
        }
        return `CTC ${out.dims.join('x')}, ${chars} characters decoded`;
    }
    return `orientation probabilities [${Array.from(d).map((v) => v.toFixed(3)).join(', ')}]`;
}

async function checkModel(ort, args, spec) {
    const src = path.join(args.models, spec.file);
    const resaved = path.join(args.tmp, spec.file.replace(/\.onnx$/, '.resaved.onnx'));
    const r = spawnSync(args.resave, [src, resaved], {encoding: 'utf8'});
    if (r.status !== 0) {
        throw new Error(`qplace re-save failed (exit ${r.status}${r.signal ? ', ' + r.signal : ''}): ` +
                        `${(r.stderr || '').trim()}`);
    }
    const opts = {intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential'};
    const a = await ort.InferenceSession.create(src, opts);
    const b = await ort.InferenceSession.create(resaved, opts);
    const same = (x, y) => JSON.stringify(x) === JSON.stringify(y);
    if (!same(a.inputNames, b.inputNames) || !same(a.outputNames, b.outputNames)) {
        throw new Error(`inputs/outputs differ: ${a.inputNames}/${a.outputNames} vs ` +
                        `${b.inputNames}/${b.outputNames}`);
    }
    const input = new ort.Tensor('float32', makeInput(spec), [1, 3, spec.h, spec.w]);
    const feeds = {[a.inputNames[0]]: input};
    const oa = await a.run(feeds);
    const ob = await b.run(feeds);
    const notes = [];
    for (const name of a.outputNames) {
        const x = oa[name], y = ob[name];
        if (x.type !== y.type || !same(x.dims, y.dims)) {
            throw new Error(`output '${name}': ${x.type}${JSON.stringify(x.dims)} vs ` +
                            `${y.type}${JSON.stringify(y.dims)}`);
        }
        const bx = Buffer.from(x.data.buffer, x.data.byteOffset, x.data.byteLength);
        const by = Buffer.from(y.data.buffer, y.data.byteOffset, y.data.byteLength);
        if (bx.length === 0) throw new Error(`output '${name}' is empty`);
        if (!bx.equals(by)) {
            let k = 0;
            while (k < bx.length && bx[k] === by[k]) k++;
            throw new Error(`output '${name}' differs from byte ${k} on`);
        }
        for (const v of x.data) {
            if (!Number.isFinite(v)) throw new Error(`output '${name}' holds ${v}`);
        }
        notes.push(describe(spec.kind, x));
    }
    fs.rmSync(resaved, {force: true});
    return notes.join('; ');
}

async function main() {
    const args = parseArgs(process.argv.slice(2));
    const required = process.env.QP_REQUIRE_REAL_MODELS === '1';
    const ortPath = path.join(path.resolve(args.npm), 'node_modules', 'onnxruntime-node');
    const missing = [];
    if (!fs.existsSync(path.join(ortPath, 'package.json'))) missing.push(ortPath);
    for (const m of MODELS) {
        if (!fs.existsSync(path.join(args.models, m.file))) missing.push(path.join(args.models, m.file));
    }
    if (missing.length) {
        if (!required) {
            console.log(`SKIP: missing ${missing.join(', ')} (run scripts/setup.sh)`);
            return EXIT_SKIP;
        }
        console.log(`FAIL: missing ${missing.join(', ')} (QP_REQUIRE_REAL_MODELS=1)`);
        console.log('0 passed, 1 failed');
        return 1;
    }
    const ort = require(ortPath);
    fs.mkdirSync(args.tmp, {recursive: true});
    let passed = 0, failed = 0;
    for (const spec of MODELS) {
        const t0 = Date.now();
        try {
            const note = await checkModel(ort, args, spec);
            console.log(`ok   ${spec.file} (1x3x${spec.h}x${spec.w}): bit-identical; ${note} ` +
                        `[${Date.now() - t0} ms]`);
            passed++;
        } catch (e) {
            console.log(`FAIL ${spec.file}: ${e.message}`);
            failed++;
        }
    }
    console.log(`${passed} passed, ${failed} failed`);
    return failed ? 1 : 0;
}

main().then((code) => process.exit(code), (e) => {
    console.log(`FAIL: ${e && e.stack ? e.stack : e}`);
    console.log('0 passed, 1 failed');
    process.exit(1);
});
