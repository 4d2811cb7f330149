// ocr_ort.js --npm DIR --model M.onnx --input X.bin --dims N,C,H,W --batch B --threads T
//            --out ARGMAX.bin
//
// The ONNX Runtime side of bench/ocr_accuracy.py: runs M (one float input `x`, one output)
// with onnxruntime-node (from DIR/node_modules, session options as bench/ort_bench.js) on the
// raw little-endian float32 tensor X of shape DIMS, B rows at a time, and writes the argmax over
// the output's last axis of every row as little-endian int32 to ARGMAX (the recognizer's greedy
// CTC decode and the classifier's label need nothing more; the full rec output of 400 lines is
// 400 MB). Prints {"version", "dims"} (the output dims of the whole set) as JSON on stdout.
'use strict';
const fs = require('fs');
const path = require('path');

function parseArgs(argv) {
    const args = {};
    for (let k = 0; k < argv.length; k += 2) {
        if (!argv[k].startsWith('--') || k + 1 >= argv.length) throw new Error(`bad argument ${argv[k]}`);
        args[argv[k].slice(2)] = argv[k + 1];
    }
    for (const need of ['npm', 'model', 'input', 'dims', 'batch', 'threads', 'out']) {
        if (!args[need]) throw new Error(`--${need} is required`);
    }
    return args;
}

function argmaxRows(data, n_rows, n_cls, out, at) {
    for (let r = 0; r < n_rows; r++) {
        let best = 0;
        let bv = data[r * n_cls];
        for (let c = 1; c < n_cls; c++) {
            const v = data[r * n_cls + c];
            if (v > bv) {
                bv = v;
                best = c;
            }
        }
        out[at + r] = best;
    }
}

(async () => {
    const args = parseArgs(process.argv.slice(2));
    const pkg = path.join(path.resolve(args.npm), 'node_modules', 'onnxruntime-node');
    const ort = require(pkg);
    const version = require(path.join(pkg, 'package.json')).version;
    const dims = args.dims.split(',').map(Number);
    const batch = Number(args.batch);
    const per = dims.slice(1).reduce((a, b) => a * b, 1);
    const buf = fs.readFileSync(args.input);
    if (buf.length !== 4 * per * dims[0]) throw new Error(`${args.input}: ${buf.length} bytes, dims ${dims}`);
    const all = new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.length));
    const session = await ort.InferenceSession.create(args.model, {
        intraOpNumThreads: Number(args.threads),
        interOpNumThreads: 1,
        executionMode: 'sequential',
        graphOptimizationLevel: 'all',
    });
    const inName = session.inputNames[0];
    const outName = session.outputNames[0];
    let argmax = null;
    let outDims = null;
    for (let n0 = 0; n0 < dims[0]; n0 += batch) {
        const nb = Math.min(batch, dims[0] - n0);
        const x = new ort.Tensor('float32', all.subarray(n0 * per, (n0 + nb) * per), [nb, ...dims.slice(1)]);
        const y = (await session.run({ [inName]: x }))[outName];
        const n_cls = y.dims[y.dims.length - 1];
        const rows_per = y.data.length / n_cls / nb;
        if (!argmax) {
            argmax = new Int32Array(dims[0] * rows_per);
            outDims = [dims[0], ...y.dims.slice(1)];
        }
        argmaxRows(y.data, nb * rows_per, n_cls, argmax, n0 * rows_per);
    }
    fs.writeFileSync(args.out, Buffer.from(argmax.buffer));
    process.stdout.write(JSON.stringify({ version, dims: outDims }) + '\n');
})().catch((e) => {
    console.error(`ocr_ort: ${e && e.stack ? e.stack : e}`);
    process.exit(1);
});
