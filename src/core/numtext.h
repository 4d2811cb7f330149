/*
 * Numbers as text that reads back exactly: files whose numbers are read again to replay a
 * computation (autotune's state file, calibration ranges) print their doubles with this.
 * cJSON's own printing does not do for them: it keeps its %.15g text whenever that reads back
 * within one epsilon of the value, so the last bits of a double can be lost (an autotune run
 * resumed from such a file recomputed a median one ulp away from the one it had logged).
 *
 *     char b[QP_DOUBLE_TEXT];
 *     fputs(qp_double_text(x, b), f);            // strtod gives back x, bit for bit
 *     cJSON_AddItemToObject(o, "x", cJSON_CreateRaw(qp_double_text(x, b)));
 */
#ifndef QP_CORE_NUMTEXT_H
#define QP_CORE_NUMTEXT_H

#define QP_DOUBLE_TEXT 32

/* The shortest of %.15g, %.16g and %.17g that strtod reads back as v (NaN and infinities,
 * which JSON cannot hold, come out as "nan" / "inf": callers check isfinite first). Returns
 * buf. */
const char *qp_double_text(double v, char buf[QP_DOUBLE_TEXT]);

#endif
