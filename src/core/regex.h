/*
 * Compiling user regexes (node-name patterns of --nodes_to_*, rules files, sensitivity blocks
 * files) safely with glibc's POSIX regcomp:
 *   - "\d" and "\D" (Python's digit classes, common in ModelOpt patterns, which POSIX lacks)
 *     become [0-9] and [^0-9] ("0-9" inside a bracket);
 *   - patterns regcomp would need memory exponential in their length for are refused before it
 *     sees them (found by fuzzing: gigabytes for 100-byte patterns): stacked quantifiers
 *     ("a++", "*?", which POSIX leaves undefined anyway), quantified groups nested in quantified
 *     groups past QP_REGEX_MAX_NODES nodes, repetition bounds above QP_REGEX_MAX_BOUND (POSIX's
 *     least RE_DUP_MAX; "x{,24444}" took glibc 3 GB), patterns over QP_REGEX_MAX_PATTERN bytes.
 *
 *     regex_t re;
 *     char msg[256];
 *     if (!qp_regex_compile(&re, "/blocks\\.\\d+/attn", QP_REGEX_ANCHORED, msg, sizeof msg))
 *         ... msg says why ...
 *     regfree(&re);
 */
#ifndef QP_CORE_REGEX_H
#define QP_CORE_REGEX_H

#include <regex.h>
#include <stddef.h>

#define QP_REGEX_MAX_PATTERN 1024
#define QP_REGEX_MAX_NODES   100000.0
#define QP_REGEX_MAX_BOUND   255

enum {
    QP_REGEX_ANCHORED = 1, /* match at the start only, as Python's re.match: "^(" pat ")" */
    QP_REGEX_NOSUB = 2     /* REG_NOSUB: no match offsets needed */
};

/* Compiles `pat` (extended syntax) into `re`: 1 on success, else 0 with the reason in msg
 * (nothing to regfree then). */
int qp_regex_compile(regex_t *re, const char *pat, int flags, char *msg, size_t msg_size);

#endif
