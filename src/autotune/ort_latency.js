// ort_latency.js --npm DIR --spec JSON
//
// The `ort` latency backend's child (src/autotune/ort.c): times the model named in the spec
// with onnxruntime-node (from DIR/node_modules): intra-op threads = spec.threads (0: ORT's
// default), inter-op 1, sequential execution, all graph optimizations; `warmup` untimed runs,
// then `runs` timed ones on deterministic inputs of the spec's shapes and types (floats from a
// seeded generator, integers and bools zero). Prints one JSON line on stdout:
//   {"version": "1.30.0", "run_ms": [1.23, ...]}
// and exits 0; on any error prints it on stderr and exits 1.
'use strict';
const path = require('path');

function parseArgs(argv) {
    const args = {};
    for (let k = 0; k < argv.length; k += 2) {
        if (!argv[k].startsWith('--') || k + 1 >= argv.length) throw new Error(`bad argument ${argv[k]}`);
        args[argv[k].slice(2)] = argv[k + 1];
    }
    for (const need of ['npm', 'spec']) {
        if (!args[need]) throw new Error(`--${need} is required`);
    }
    return args;
}

const ARRAYS = {
    float32: Float32Array, float64: Float64Array, int64: BigInt64Array, int32: Int32Array,
    int8: Int8Array, uint8: Uint8Array, bool: Uint8Array,
};

function makeInput(ort, e, index) {
    const Arr = ARRAYS[e.type];
    if (!Arr) throw new Error(`input ${e.name}: unsupported type ${e.type}`);
    const n = e.dims.reduce((a, b) => a * b, 1);
    const data = new Arr(n);
    if (e.type === 'float32' || e.type === 'float64') {
        let s = (index + 1) * 2654435761 >>> 0;
        for (let i = 0; i < n; i++) {
            s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
            data[i] = s / 4294967296;
        }
    }
    return new ort.Tensor(e.type, data, e.dims);
}

(async () => {
    const args = parseArgs(process.argv.slice(2));
    const pkg = path.join(path.resolve(args.npm), 'node_modules', 'onnxruntime-node');
    const ort = require(pkg);
    const version = require(path.join(pkg, 'package.json')).version;
    const spec = JSON.parse(args.spec);
    const opts = { interOpNumThreads: 1, executionMode: 'sequential', graphOptimizationLevel: 'all' };
    if (spec.threads > 0) opts.intraOpNumThreads = spec.threads;
    const session = await ort.InferenceSession.create(spec.model, opts);
    const feeds = {};
    spec.inputs.forEach((e, i) => { feeds[e.name] = makeInput(ort, e, i); });
    for (let i = 0; i < spec.warmup; i++) await session.run(feeds);
    const times = [];
    for (let i = 0; i < spec.runs; i++) {
        const t0 = process.hrtime.bigint();
        await session.run(feeds);
        times.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    process.stdout.write(JSON.stringify({ version, run_ms: times }) + '\n');
})().catch((e) => {
    console.error(`ort_latency: ${e && e.stack ? e.stack : e}`);
    process.exit(1);
});
