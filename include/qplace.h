/*
 * qplace — post-training quantization of ONNX models with Q/DQ nodes for TensorRT-style
 * deployment. This header includes every public module header.
 */
#ifndef QPLACE_H
#define QPLACE_H
#include "qplace/status.h"
#include "qplace/dtype.h"
#include "qplace/array.h"
#include "qplace/model.h"
#include "qplace/npy.h"
#include "qplace/placement.h"
#include "qplace/calib.h"
#include "qplace/graph.h"
#include "qplace/quantize.h"
#include "qplace/autotune.h"
#include "qplace/session.h"
#include "qplace/sensitivity.h"
#endif
