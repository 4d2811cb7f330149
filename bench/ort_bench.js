// ort_bench.js --npm DIR --spec SPEC.json --result RESULT.json
//
// The ONNX Runtime side of `qplace bench --compare-ort`: runs the model named in SPEC with
// onnxruntime-node (from DIR/node_modules) on the inputs qplace wrote (raw little-endian files),
// with intra-op threads = spec.threads, inter-op threads 1 and sequential execution, `warmup`
// untimed then `iterations` timed runs, writes each output's raw bytes to the file the spec
// names, and the timings plus peak RSS (process.resourceUsage().maxRSS, KiB) to RESULT.
'use strict';
const fs = require('fs');
const path = require('path');

function parseArgs(argv) {
    const args = {};
    for (let k = 0; k < argv.length; k += 2) {
        if (!argv[k].startsWith('--') || k + 1 >= argv.length) throw new Error(`bad argument ${argv[k]}`);
        args[argv[k].slice(2)] = argv[k + 1];
    }
    for (const need of ['npm', 'spec', 'result']) {
        if (!args[need]) throw new Error(`--${need} is required`);
    }
    return args;
}

const ARRAYS = {
    float32: Float32Array, float64: Float64Array, int64: BigInt64Array, int32: Int32Array,
    int8: Int8Array, uint8: Uint8Array, bool: Uint8Array,
};

function readInput(ort, e) {
    const buf = fs.readFileSync(e.file);
    const Arr = ARRAYS[e.type];
    if (!Arr) throw new Error(`input ${e.name}: unsupported type ${e.type}`);
    const copy = new Uint8Array(buf.length);
    copy.set(buf);
    const data = new Arr(copy.buffer, 0, buf.length / Arr.BYTES_PER_ELEMENT);
    return new ort.Tensor(e.type, e.type === 'bool' ? Uint8Array.from(data) : data, e.dims);
}

(async () => {
    const args = parseArgs(process.argv.slice(2));
    const pkg = path.join(path.resolve(args.npm), 'node_modules', 'onnxruntime-node');
    const ort = require(pkg);
    const version = require(path.join(pkg, 'package.json')).version;
    const spec = JSON.parse(fs.readFileSync(args.spec, 'utf8'));
    const session = await ort.InferenceSession.create(spec.model, {
        intraOpNumThreads: spec.threads,
        interOpNumThreads: 1,
        executionMode: 'sequential',
        graphOptimizationLevel: 'all',
    });
    const feeds = {};
    for (const e of spec.inputs) feeds[e.name] = readInput(ort, e);
    let out = null;
    for (let i = 0; i < spec.warmup; i++) out = await session.run(feeds);
    const times = [];
    for (let i = 0; i < spec.iterations; i++) {
        const t0 = process.hrtime.bigint();
        out = await session.run(feeds);
        times.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    for (const o of spec.outputs) {
        const t = out[o.name];
        if (!t) throw new Error(`ONNX Runtime gave no output ${o.name}`);
        const d = t.data;
        fs.writeFileSync(o.file, Buffer.from(d.buffer, d.byteOffset, d.byteLength));
    }
    const sorted = times.slice().sort((a, b) => a - b);
    const n = sorted.length;
    const median = n % 2 ? sorted[(n - 1) / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    const result = {
        version,
        median_ms: median,
        min_ms: sorted[0],
        mean_ms: times.reduce((a, b) => a + b, 0) / n,
        peak_rss_kb: process.resourceUsage().maxRSS,
    };
    fs.writeFileSync(args.result, JSON.stringify(result));
})().catch((e) => {
    console.error(`ort_bench: ${e && e.stack ? e.stack : e}`);
    process.exit(1);
});
