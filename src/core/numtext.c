/* Numbers as text that reads back exactly (numtext.h). */
#include "core/numtext.h"

#include <stdio.h>
#include <stdlib.h>

const char *qp_double_text(double v, char buf[QP_DOUBLE_TEXT]) {
    for (int digits = 15; digits < 17; digits++) {
        snprintf(buf, QP_DOUBLE_TEXT, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) return buf;
    }
    snprintf(buf, QP_DOUBLE_TEXT, "%.17g", v);
    return buf;
}
