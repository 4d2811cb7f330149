// Smoke check for the ONNX Runtime Node.js binding installed with --ignore-scripts: builds a
// one-node ONNX model (c = a + b, float[2]) in memory, runs it and checks the sum.
// Usage: node scripts/ort_smoke.js NPM_DIR   (NPM_DIR holds node_modules/onnxruntime-node)
'use strict';
const path = require('path');

const npmDir = process.argv[2] || path.join(__dirname, '..', '.cache', 'npm');
const ort = require(path.join(path.resolve(npmDir), 'node_modules', 'onnxruntime-node'));

// Minimal protobuf writer: enough for the handful of ONNX messages below.
function varint(n) {
    const out = [];
    while (n > 127) {
        out.push((n & 127) | 128);
        n = Math.floor(n / 128);
    }
    out.push(n);
    return out;
}
function fieldVarint(num, v) { return [...varint(num << 3), ...varint(v)]; }
function fieldBytes(num, bytes) { return [...varint((num << 3) | 2), ...varint(bytes.length), ...bytes]; }
function fieldStr(num, s) { return fieldBytes(num, [...Buffer.from(s, 'utf8')]); }

// ValueInfoProto{name, type{tensor_type{elem_type FLOAT, shape{dim{dim_value 2}}}}}
function floatVec2(name) {
    const shape = fieldBytes(1, fieldVarint(1, 2));
    const tensorType = [...fieldVarint(1, 1), ...fieldBytes(2, shape)];
    return [...fieldStr(1, name), ...fieldBytes(2, fieldBytes(1, tensorType))];
}
const node = [...fieldStr(1, 'a'), ...fieldStr(1, 'b'), ...fieldStr(2, 'c'), ...fieldStr(3, 'add'),
              ...fieldStr(4, 'Add')];
const graph = [...fieldBytes(1, node), ...fieldStr(2, 'smoke'), ...fieldBytes(11, floatVec2('a')),
               ...fieldBytes(11, floatVec2('b')), ...fieldBytes(12, floatVec2('c'))];
const model = Uint8Array.from([...fieldVarint(1, 8), ...fieldStr(2, 'qplace-smoke'),
                               ...fieldBytes(7, graph),
                               ...fieldBytes(8, [...fieldStr(1, ''), ...fieldVarint(2, 13)])]);

(async () => {
    const session = await ort.InferenceSession.create(model, {intraOpNumThreads: 1});
    const a = new ort.Tensor('float32', Float32Array.from([1.5, -2]), [2]);
    const b = new ort.Tensor('float32', Float32Array.from([0.25, 4]), [2]);
    const out = await session.run({a, b});
    const c = Array.from(out.c.data);
    if (c.length !== 2 || c[0] !== 1.75 || c[1] !== 2) {
        throw new Error(`unexpected result ${JSON.stringify(c)}`);
    }
    console.log(`onnxruntime-node ${require(path.join(path.resolve(npmDir), 'node_modules',
                                                    'onnxruntime-node', 'package.json')).version}: ok`);
})().catch((e) => {
    console.error(`ort_smoke: ${e && e.stack ? e.stack : e}`);
    process.exit(1);
});
