/* Regex compilation shared by node-name patterns and blocks files (core/regex.h). */
#include "core/regex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Node-name patterns are short; glibc's regcomp needs memory exponential in stacked
 * quantifiers ("a+++++...", found by fuzzing: gigabytes for a 100-byte pattern), which POSIX
 * leaves undefined anyway, so both are refused before compiling. */

static int stacked_quantifier(const char *pat, size_t n) {
    int in_bracket = 0, prev_quant = 0;
    for (size_t i = 0; i < n; i++) {
        char c = pat[i];
        if (in_bracket) { /* POSIX: a backslash is literal in a bracket expression */
            if (c == ']') in_bracket = 0;
            continue;
        }
        if (c == '\\' && i + 1 < n) {
            i++;
            prev_quant = 0;
            continue;
        }
        if (c == '[') {
            in_bracket = 1;
            if (i + 1 < n && pat[i + 1] == '^') i++;
            if (i + 1 < n && pat[i + 1] == ']') i++;
            prev_quant = 0;
            continue;
        }
        int quant = c == '*' || c == '+' || c == '?' || c == '{';
        if (quant && prev_quant) return 1;
        if (c == '{') {
            while (i + 1 < n && pat[i] != '}')
                i++;
        }
        prev_quant = quant;
    }
    return 0;
}

/* The index of the ']' that ends the bracket expression opening at t[i] (POSIX: a leading ']'
 * or '^]' is a member, a backslash is literal), or of the terminating '\0'. */
static size_t bracket_end(const char *t, size_t i) {
    i++;
    if (t[i] == '^') i++;
    if (t[i] == ']') i++;
    while (t[i] && t[i] != ']')
        i++;
    return i;
}

/* The largest repetition bound of extended regex t ("{m}", "{m,}", "{m,n}", "{,n}"), outside
 * brackets and escapes; -1 when it has none. glibc's regcomp needs memory quadratic in an
 * optional bound's copies (each copy's epsilon closure holds the copies after it: "#{,24444}"
 * took 3 GB, found by fuzzing), which the node estimate below, linear in copies, misses. */
static long largest_bound(const char *t) {
    long most = -1;
    for (size_t i = 0; t[i]; i++) {
        if (t[i] == '\\' && t[i + 1]) {
            i++;
        } else if (t[i] == '[') {
            i = bracket_end(t, i);
            if (!t[i]) break;
        } else if (t[i] == '{') {
            for (i++; t[i] && t[i] != '}'; i++) {
                if (t[i] < '0' || t[i] > '9') continue;
                char *end;
                long v = strtol(t + i, &end, 10);
                if (v > most) most = v;
                i = (size_t)(end - t) - 1;
            }
            if (!t[i]) break;
        }
    }
    return most;
}

/* An estimate of the nodes glibc's regcomp builds for extended regex t: it copies the subtree of
 * each '+' (x+ is x x*) and of each bound ({m,n}: max(m, n) copies), so quantified groups nested
 * in quantified groups multiply ("((a)+)+..." doubles per level; found by fuzzing: gigabytes).
 * Counted on a stack of open groups; alternatives add up. Stops counting above `limit`. */
static double regex_nodes(const char *t, double limit) {
    double total[64] = {0}, last[64] = {0};
    int d = 0;
    for (size_t i = 0; t[i]; i++) {
        char c = t[i];
        double atom = 1;
        if (c == '(') {
            if (d == 63) return limit + 1;
            d++;
            total[d] = last[d] = 0;
            continue;
        }
        if (c == ')' && d > 0) {
            atom = total[d] + 1;
            d--;
        } else if (c == '|') {
            last[d] = 0;
            continue;
        } else if (c == '*' || c == '?') {
            total[d] += 1;
            continue;
        } else if (c == '+' || c == '{') {
            double copies = 2;
            if (c == '{') {
                long lo = strtol(t + i + 1, NULL, 10), hi = lo;
                const char *comma = strchr(t + i, ','), *end = strchr(t + i, '}');
                if (comma && end && comma < end && comma + 1 < end)
                    hi = strtol(comma + 1, NULL, 10);
                copies = (double)(lo > hi ? lo : hi) + 1;
                while (t[i + 1] && t[i] != '}')
                    i++;
            }
            total[d] += last[d] * (copies - 1);
            last[d] *= copies;
            if (total[d] > limit) return total[d];
            continue;
        } else if (c == '\\' && t[i + 1]) {
            i++;
        } else if (c == '[') {
            i = bracket_end(t, i);
            if (!t[i]) break;
        }
        total[d] += atom;
        last[d] = atom;
        if (total[d] > limit) return total[d];
    }
    return total[0];
}

int qp_regex_compile(regex_t *re, const char *pat, int flags, char *msg, size_t msg_size) {
    size_t n = strlen(pat);
    if (n > QP_REGEX_MAX_PATTERN)
        return snprintf(msg, msg_size, "pattern longer than %d bytes", QP_REGEX_MAX_PATTERN), 0;
    char *t = malloc(n * 8 + 8);
    if (!t) return snprintf(msg, msg_size, "out of memory"), 0;
    size_t k = 0;
    int in_bracket = 0;
    if (flags & QP_REGEX_ANCHORED) {
        t[k++] = '^';
        t[k++] = '(';
    }
    for (size_t i = 0; i < n; i++) {
        char c = pat[i];
        if (c == '\\' && i + 1 < n && (pat[i + 1] == 'd' || pat[i + 1] == 'D')) {
            const char *rep = in_bracket ? (pat[i + 1] == 'd' ? "0-9" : "")
                                         : (pat[i + 1] == 'd' ? "[0-9]" : "[^0-9]");
            memcpy(t + k, rep, strlen(rep));
            k += strlen(rep);
            i++;
            continue;
        }
        if (c == '\\' && i + 1 < n) {
            t[k++] = c;
            t[k++] = pat[++i];
            continue;
        }
        if (c == '[' && !in_bracket) {
            in_bracket = 1;
            t[k++] = c;
            /* A leading ']' (or '^]') is a literal member. */
            if (i + 1 < n && pat[i + 1] == '^') t[k++] = pat[++i];
            if (i + 1 < n && pat[i + 1] == ']') t[k++] = pat[++i];
            continue;
        }
        if (c == ']' && in_bracket) in_bracket = 0;
        t[k++] = c;
    }
    if (flags & QP_REGEX_ANCHORED) t[k++] = ')';
    t[k] = '\0';
    /* Both checks on what regcomp will read (brackets end where POSIX ends them). */
    if (stacked_quantifier(t, k)) {
        free(t);
        return snprintf(msg, msg_size,
                        "stacked quantifiers (like '++' or '*?') are not "
                        "supported"),
               0;
    }
    long bound = largest_bound(t);
    if (bound > QP_REGEX_MAX_BOUND) {
        free(t);
        return snprintf(msg, msg_size, "repetition bound %ld above %d is not supported", bound,
                        QP_REGEX_MAX_BOUND),
               0;
    }
    if (regex_nodes(t, QP_REGEX_MAX_NODES) > QP_REGEX_MAX_NODES) {
        free(t);
        return snprintf(msg, msg_size,
                        "pattern too complex (quantified groups nested in quantified groups "
                        "expand past %d nodes)",
                        (int)QP_REGEX_MAX_NODES),
               0;
    }
    int rc = regcomp(re, t, REG_EXTENDED | (flags & QP_REGEX_NOSUB ? REG_NOSUB : 0));
    free(t);
    if (rc != 0) {
        regerror(rc, re, msg, msg_size);
        return 0;
    }
    return 1;
}
