// engine_ort.js --npm DIR --models DIR --qplace BIN --tmp DIR [--det-size N] [--if-model FILE]
//
// The engine against ONNX Runtime on the real PaddleOCR models: det (1x3xNxN, N = 640 unless
// --det-size says otherwise: the ASan build uses 320 to stay within the time budget), rec
// (1x3x48x320) and cls (1x3x48x192) run in `qplace run` (input .npy, output .npz) and in
// onnxruntime-node on the same deterministic, real-looking input (a white page with dark
// text-like strokes, normalised as PaddleOCR does: the generator is lib/testdata.js's), and
// every output element must satisfy |qplace - ort| <= 1e-4 + 1e-3 * |ort|. Missing models or
// runtime: skipped (exit 77) unless QP_REQUIRE_REAL_MODELS=1, then failed. --if-model (the ONNX
// test model node/test_if: an If on a bool input) is run for both conditions the same way. Closes with
// "N passed, N failed".
'use strict';
const fs = require('fs');
const path = require('path');
const {spawnSync} = require('child_process');
const {makeInput, npyBytes, readNpz} = require('./lib/testdata.js');

const EXIT_SKIP = 77;
const RTOL = 1e-3, ATOL = 1e-4;

function parseArgs(argv) {
    const args = {};
    for (let k = 0; k < argv.length; k += 2) {
        if (!argv[k].startsWith('--') || k + 1 >= argv.length) {
            throw new Error(`bad argument ${argv[k]}`);
        }
        args[argv[k].slice(2)] = argv[k + 1];
    }
    for (const need of ['npm', 'models', 'qplace', 'tmp']) {
        if (!args[need]) throw new Error(`--${need} is required`);
    }
    return args;
}

function models(detSize) {
    return [
        {file: 'ch_PP-OCRv4_det_infer.onnx', h: detSize, w: detSize, kind: 'det'},
        {file: 'ch_PP-OCRv4_rec_infer.onnx', h: 48, w: 320, kind: 'rec'},
        {file: 'ch_ppocr_mobile_v2.0_cls_infer.onnx', h: 48, w: 192, kind: 'cls'},
    ];
}

async function checkModel(ort, args, spec) {
    const model = path.join(args.models, spec.file);
    const input = makeInput(spec);
    const shape = [1, 3, spec.h, spec.w];
    const opts = {intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential'};
    const sess = await ort.InferenceSession.create(model, opts);
    const ref = await sess.run({[sess.inputNames[0]]: new ort.Tensor('float32', input, shape)});
    const inFile = path.join(args.tmp, `${spec.kind}.in.npy`);
    const outFile = path.join(args.tmp, `${spec.kind}.out.npz`);
    fs.writeFileSync(inFile, npyBytes(input, shape));
    fs.rmSync(outFile, {force: true});
    const t0 = Date.now();
    const r = spawnSync(args.qplace, ['run', model, '--input', `${sess.inputNames[0]}=${inFile}`,
                                      '--output', outFile], {encoding: 'utf8'});
    const ms = Date.now() - t0;
    if (r.status !== 0) {
        throw new Error(`qplace run failed (exit ${r.status}${r.signal ? ', ' + r.signal : ''}): ` +
                        `${(r.stderr || '').trim()}`);
    }
    const got = readNpz(outFile);
    const notes = [];
    for (const name of sess.outputNames) {
        const key = name.replace(/[\/\\\x00-\x1f\x7f]/g, '_');
        const x = got[key], y = ref[name];
        if (!x) throw new Error(`output '${name}' missing from ${outFile}`);
        if (JSON.stringify(x.dims) !== JSON.stringify(y.dims.map(Number))) {
            throw new Error(`output '${name}': shape ${x.dims} vs ORT ${y.dims}`);
        }
        let worst = 0, at = -1, bad = 0;
        for (let k = 0; k < y.data.length; k++) {
            const d = Math.abs(x.data[k] - y.data[k]);
            if (!(d <= ATOL + RTOL * Math.abs(y.data[k]))) bad++;
            if (!(d <= worst)) {
                worst = d;
                at = k;
            }
        }
        if (bad) {
            throw new Error(`output '${name}': ${bad} of ${y.data.length} elements out of ` +
                            `tolerance; worst |diff| ${worst} at ${at} (qplace ${x.data[at]}, ` +
                            `ORT ${y.data[at]})`);
        }
        notes.push(`${name} ${x.dims.join('x')} max |diff| ${worst.toExponential(2)}`);
    }
    fs.rmSync(inFile, {force: true});
    fs.rmSync(outFile, {force: true});
    return `${notes.join('; ')} [qplace run ${ms} ms]`;
}

// An If model: cond (bool scalar) -> outputs, qplace vs ORT, for both conditions.
async function checkIf(ort, args, model) {
    const sess = await ort.InferenceSession.create(model);
    const notes = [];
    for (const cond of [true, false]) {
        const ref = await sess.run({[sess.inputNames[0]]: new ort.Tensor('bool', [cond], [])});
        const inFile = path.join(args.tmp, 'if.in.npy');
        const outFile = path.join(args.tmp, 'if.out.npz');
        fs.writeFileSync(inFile, npyBytes(new Uint8Array([cond ? 1 : 0]), [], '|b1'));
        fs.rmSync(outFile, {force: true});
        const r = spawnSync(args.qplace, ['run', model, '--input', `${sess.inputNames[0]}=${inFile}`,
                                          '--output', outFile], {encoding: 'utf8'});
        if (r.status !== 0) throw new Error(`qplace run failed (exit ${r.status}): ${(r.stderr || '').trim()}`);
        const got = readNpz(outFile);
        for (const name of sess.outputNames) {
            const x = got[name], y = ref[name];
            if (!x || x.data.length !== y.data.length) throw new Error(`cond ${cond}: output '${name}' missing or mis-sized`);
            for (let k = 0; k < y.data.length; k++) {
                if (!(Math.abs(x.data[k] - y.data[k]) <= ATOL + RTOL * Math.abs(y.data[k]))) {
                    throw new Error(`cond ${cond}: output '${name}'[${k}] ${x.data[k]} vs ORT ${y.data[k]}`);
                }
            }
            notes.push(`cond ${cond}: ${name} = [${Array.from(x.data).join(', ')}]`);
        }
    }
    return notes.join('; ');
}

async function main() {
    const args = parseArgs(process.argv.slice(2));
    const required = process.env.QP_REQUIRE_REAL_MODELS === '1';
    const detSize = Number(args['det-size'] || 640);
    const MODELS = models(detSize);
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
        try {
            const note = await checkModel(ort, args, spec);
            console.log(`ok   ${spec.file} (1x3x${spec.h}x${spec.w}): ${note}`);
            passed++;
        } catch (e) {
            console.log(`FAIL ${spec.file} (1x3x${spec.h}x${spec.w}): ${e.message}`);
            failed++;
        }
    }
    if (args['if-model']) {
        try {
            const note = await checkIf(ort, args, args['if-model']);
            console.log(`ok   ${args['if-model']}: ${note}`);
            passed++;
        } catch (e) {
            console.log(`FAIL ${args['if-model']}: ${e.message}`);
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
