/*
 * A bounded walk over the protobuf wire format, run before protobuf_c_message_unpack.
 *
 * protobuf-c unpacks nested messages by recursion with no depth limit, so a few kilobytes of
 * nested GraphProto/AttributeProto bytes would overflow the stack. This walk follows the same
 * message-typed fields the unpacker follows (found through the protobuf-c descriptors), counts
 * nesting levels and stops at a fixed bound. Its own recursion is bounded by that same limit.
 * Fields unknown to the descriptor are kept opaque by protobuf-c (never recursed into), so they
 * are only skipped here.
 */
#include <stdio.h>

#include "onnx/onnx_io.h"

enum walk_result { WALK_OK = 0, WALK_MALFORMED, WALK_TOO_DEEP };

struct walk {
    const uint8_t *base;
    int max_depth;
    size_t bad_offset;
    const char *what;
    const ProtobufCMessageDescriptor *deep_desc;
};

/* Reads a varint at *pos (< end). 0 when truncated or longer than 10 bytes. */
static int read_varint(const uint8_t *p, size_t end, size_t *pos, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (*pos >= end) return 0;
        uint8_t b = p[(*pos)++];
        if (i == 9 && b > 1) return 0; /* more than 64 bits */
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            return 1;
        }
    }
    return 0;
}

static enum walk_result walk_message(struct walk *w, size_t start, size_t end,
                                     const ProtobufCMessageDescriptor *desc, int depth) {
    const uint8_t *p = w->base;
    size_t pos = start;
    while (pos < end) {
        size_t field_at = pos;
        uint64_t tag;
        if (!read_varint(p, end, &pos, &tag) || tag > UINT32_MAX) {
            w->bad_offset = field_at;
            w->what = "bad field tag";
            return WALK_MALFORMED;
        }
        uint32_t number = (uint32_t)(tag >> 3);
        unsigned wire = (unsigned)(tag & 7);
        if (number == 0) {
            w->bad_offset = field_at;
            w->what = "field number 0";
            return WALK_MALFORMED;
        }
        uint64_t v;
        switch (wire) {
        case PROTOBUF_C_WIRE_TYPE_VARINT:
            if (!read_varint(p, end, &pos, &v)) {
                w->bad_offset = field_at;
                w->what = "truncated varint";
                return WALK_MALFORMED;
            }
            break;
        case PROTOBUF_C_WIRE_TYPE_64BIT:
            if (end - pos < 8) {
                w->bad_offset = field_at;
                w->what = "truncated 64-bit field";
                return WALK_MALFORMED;
            }
            pos += 8;
            break;
        case PROTOBUF_C_WIRE_TYPE_32BIT:
            if (end - pos < 4) {
                w->bad_offset = field_at;
                w->what = "truncated 32-bit field";
                return WALK_MALFORMED;
            }
            pos += 4;
            break;
        case PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED: {
            if (!read_varint(p, end, &pos, &v) || v > end - pos) {
                w->bad_offset = field_at;
                w->what = "length-delimited field runs past the end of its message";
                return WALK_MALFORMED;
            }
            size_t len = (size_t)v;
            const ProtobufCFieldDescriptor *f =
                desc ? protobuf_c_message_descriptor_get_field(desc, number) : NULL;
            if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
                const ProtobufCMessageDescriptor *sub = f->descriptor;
                if (depth + 1 > w->max_depth) {
                    w->bad_offset = field_at;
                    w->deep_desc = sub;
                    return WALK_TOO_DEEP;
                }
                enum walk_result r = walk_message(w, pos, pos + len, sub, depth + 1);
                if (r != WALK_OK) return r;
            }
            pos += len;
            break;
        }
        default: /* groups (3, 4; protobuf-c cannot read them) and the undefined 6, 7 */
            w->bad_offset = field_at;
            w->what = "unsupported wire type";
            return WALK_MALFORMED;
        }
    }
    return WALK_OK;
}

enum qp_status qp_onnx_check_wire(const uint8_t *data, size_t size,
                                  const ProtobufCMessageDescriptor *desc, int max_depth,
                                  struct qp_error *err) {
    struct walk w = {.base = data, .max_depth = max_depth};
    if (max_depth < 1)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "protobuf nesting limit %d is below 1",
                            max_depth);
    switch (walk_message(&w, 0, size, desc, 1)) {
    case WALK_OK:
        return QP_OK;
    case WALK_TOO_DEEP:
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "messages nested deeper than %d levels (a %s at byte offset %zu); "
                            "refusing to parse",
                            max_depth, w.deep_desc ? w.deep_desc->name : "message", w.bad_offset);
    case WALK_MALFORMED:
        break;
    }
    return qp_error_set(err, QP_ERR_BAD_INPUT, "not a valid ONNX protobuf: %s at byte offset %zu",
                        w.what, w.bad_offset);
}
