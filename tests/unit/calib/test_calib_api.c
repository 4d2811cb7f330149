/* The public calibration API (qplace/calib.h): the callback provider (batches from memory, by
 * index, checked against the first batch), qp_calibrate with and without a placement, its
 * options' checks and the meta it writes, and qp_provider_open_model's synthetic data. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "../test_model.h"
#include "calib/provider.h"
#include "ir/ir.h"
#include "qplace/calib.h"
#include "qplace/placement.h"

static struct qp_opset opset17 = {"", 17};
static struct qp_dim x_dims[2] = {{-1, "batch"}, {4, NULL}};

/* x[batch, 4] -> Relu -> r -> Neg -> y. */
static struct qp_model *model(void) {
    struct qp_model *m = test_model_create(&opset17);
    test_model_add_input(m, "x", QP_DTYPE_FLOAT, 2, x_dims);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    const char *in = "x", *r = "r", *y = "y";
    assert_int_equal(qp_graph_add_node(g, "relu", "Relu", "", 1, &in, 1, &r, NULL, &err), QP_OK);
    assert_int_equal(qp_graph_add_node(g, "neg", "Neg", "", 1, &r, 1, &y, NULL, &err), QP_OK);
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "y"), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    return m;
}

/* Three batches of 2 rows; batch k holds k * 8 + i - 5 for i = 0..7. `bad` makes batch
 * `bad_index` misbehave: 1 a double array, 2 an error status, 3 nothing filled. */
struct batches {
    float data[3][8];
    int calls;
    int bad, bad_index;
};

static enum qp_status give(void *user, uint64_t index, struct qp_array *inputs,
                           struct qp_error *err) {
    struct batches *b = user;
    b->calls++;
    int64_t dims[2] = {2, 4};
    if (b->bad && (int)index == b->bad_index) {
        if (b->bad == 2) return qp_error_set(err, QP_ERR_IO, "the source went away");
        if (b->bad == 3) return QP_OK;
        return qp_array_alloc(&inputs[0], QP_DTYPE_DOUBLE, 2, dims, err);
    }
    return qp_array_view(&inputs[0], QP_DTYPE_FLOAT, 2, dims, b->data[index], sizeof b->data[0],
                         err);
}

static struct batches make_batches(void) {
    struct batches b = {0};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 8; i++)
            b.data[k][i] = (float)(k * 8 + i - 5);
    return b;
}

static void callback_provider_passes(void **state) {
    (void)state;
    struct batches b = make_batches();
    const char *names[] = {"x"};
    struct qp_provider *p = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_provider_callback_create(names, 1, 3, give, &b, &p, &err), QP_OK);
    assert_string_equal(qp_provider_source(p), "memory");
    assert_int_equal(qp_provider_n_batches(p), 3);
    assert_int_equal(qp_provider_n_samples(p), 0); /* not known before a full pass */
    for (int pass = 0; pass < 2; pass++) {
        const struct qp_array *a = NULL;
        int end = 0, n = 0;
        while (qp_provider_next(p, &a, &end, &err) == QP_OK && !end) {
            assert_int_equal(a[0].dtype, QP_DTYPE_FLOAT);
            assert_true(((const float *)a[0].data)[0] == (float)(n * 8 - 5));
            n++;
        }
        assert_int_equal(end, 1);
        assert_int_equal(n, 3);
        assert_int_equal(qp_provider_n_samples(p), 6);
        assert_int_equal(qp_provider_reset(p, &err), QP_OK);
    }
    assert_int_equal(b.calls, 6);
    qp_provider_free(p);
}

/* The head of a provider: whole batches until the sample count is reached, every pass. */
static void head_provider_stops_at_the_count(void **state) {
    (void)state;
    struct batches b = make_batches();
    const char *names[] = {"x"};
    struct qp_provider *p = NULL, *h = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_provider_callback_create(names, 1, 3, give, &b, &p, &err), QP_OK);
    assert_int_equal(qp_provider_head_create(p, 0, &h, &err), QP_ERR_USAGE);
    for (uint64_t cap = 1; cap <= 8; cap++) {
        assert_int_equal(qp_provider_head_create(p, cap, &h, &err), QP_OK);
        for (int pass = 0; pass < 2; pass++) {
            const struct qp_array *a = NULL;
            int end = 0, n = 0;
            while (qp_provider_next(h, &a, &end, &err) == QP_OK && !end) {
                assert_true(((const float *)a[0].data)[0] == (float)(n * 8 - 5));
                assert_int_equal(a[0].owned, 0);
                n++;
            }
            assert_int_equal(end, 1);
            int want = cap >= 6 ? 3 : (int)((cap + 1) / 2); /* batches of 2 samples */
            assert_int_equal(n, want);
            assert_int_equal(qp_provider_reset(h, &err), QP_OK);
        }
        qp_provider_free(h);
    }
    qp_provider_free(p);
}

static void callback_provider_bad(void **state) {
    (void)state;
    const char *names[] = {"x"}, *twice[] = {"x", "x"}, *empty[] = {""};
    struct qp_provider *p = NULL;
    struct qp_error err = {0};
    struct batches b = make_batches();
    assert_int_equal(qp_provider_callback_create(names, 1, 0, give, &b, &p, &err), QP_ERR_USAGE);
    assert_int_equal(qp_provider_callback_create(names, 1, 3, NULL, &b, &p, &err), QP_ERR_USAGE);
    assert_int_equal(qp_provider_callback_create(twice, 2, 3, give, &b, &p, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "'x' is named twice"));
    assert_int_equal(qp_provider_callback_create(empty, 1, 3, give, &b, &p, &err), QP_ERR_USAGE);
    assert_null(p);
    struct {
        int bad;
        enum qp_status st;
        const char *msg;
    } cases[] = {{1, QP_ERR_BAD_INPUT, "batch 1: input 'x' is double of rank 2, batch 0 was float"},
                 {2, QP_ERR_IO, "calibration data: batch 1: the source went away"},
                 {3, QP_ERR_BAD_INPUT, "batch 1: input 'x' was not filled"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        b.bad = cases[c].bad;
        b.bad_index = 1;
        assert_int_equal(qp_provider_callback_create(names, 1, 3, give, &b, &p, &err), QP_OK);
        const struct qp_array *a = NULL;
        int end = 0;
        assert_int_equal(qp_provider_next(p, &a, &end, &err), QP_OK);
        assert_int_equal(qp_provider_next(p, &a, &end, &err), cases[c].st);
        assert_non_null(strstr(err.msg, cases[c].msg));
        qp_provider_free(p); /* frees the double array the bad batch allocated (ASan) */
        p = NULL;
    }
}

static void calibrate_max_from_memory(void **state) {
    (void)state;
    struct qp_model *m = model();
    struct batches b = make_batches();
    const char *names[] = {"x"};
    struct qp_provider *p = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_provider_callback_create(names, 1, 3, give, &b, &p, &err), QP_OK);
    struct qp_calibrate_options o;
    qp_calibrate_options_default(&o);
    assert_int_equal(o.method, QP_CALIB_ENTROPY);
    o.method = QP_CALIB_MAX;
    o.n_threads = 1;
    struct qp_ranges *r = NULL;
    struct qp_calibrate_report rep;
    assert_int_equal(qp_calibrate(m, p, &o, &r, &rep, &err), QP_OK);
    assert_int_equal(rep.n_batches, 3);
    assert_int_equal(rep.n_samples, 6);
    const struct qp_range *x = qp_ranges_find(r, "x"), *rr = qp_ranges_find(r, "r");
    assert_non_null(x);
    assert_non_null(rr);
    assert_true(x->lo == -5.0f && x->hi == 18.0f && x->amax == 18.0f);
    assert_true(rr->lo == 0.0f && rr->hi == 18.0f);
    const struct qp_ranges_meta *meta = qp_ranges_get_meta(r);
    assert_string_equal(meta->method, "max");
    assert_string_equal(meta->calibration_source, "memory");
    assert_int_equal(meta->num_samples, 6);
    qp_ranges_free(r);

    /* Only the tensors of a placement; one naming a missing tensor is refused. */
    struct qp_placement *pl = qp_placement_create();
    assert_int_equal(qp_placement_add_edge(pl, "r", "neg", 0, "test", &err), QP_OK);
    o.placement = pl;
    assert_int_equal(qp_calibrate(m, p, &o, &r, NULL, &err), QP_OK);
    assert_int_equal(qp_ranges_count(r), 1);
    assert_non_null(qp_ranges_find(r, "r"));
    qp_ranges_free(r);
    r = NULL;
    assert_int_equal(qp_placement_add_edge(pl, "nope", "relu", 0, "test", &err), QP_OK);
    assert_int_equal(qp_calibrate(m, p, &o, &r, NULL, &err), QP_ERR_BAD_INPUT);
    assert_null(r);
    qp_placement_free(pl);

    o.placement = NULL;
    o.percentile = 0;
    assert_int_equal(qp_calibrate(m, p, &o, &r, NULL, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "percentile"));
    o.percentile = QP_CALIB_DEFAULT_PERCENTILE;
    o.method = QP_CALIB_METHOD_COUNT;
    assert_int_equal(qp_calibrate(m, p, &o, &r, NULL, &err), QP_ERR_USAGE);
    assert_null(r);
    qp_provider_free(p);
    qp_model_free(m);
}

static void open_model_synthetic_and_bad_shapes(void **state) {
    (void)state;
    struct qp_model *m = model();
    struct qp_provider *p = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_provider_open_model(m, NULL, "x:3x4", NULL, &p, &err), QP_OK);
    assert_true(qp_provider_is_synthetic(p));
    assert_int_equal(qp_provider_n_samples(p), 3);
    struct qp_ranges *r = NULL;
    assert_int_equal(qp_calibrate(m, p, NULL, &r, NULL, &err), QP_OK);
    assert_string_equal(qp_ranges_get_meta(r)->calibration_source, "synthetic");
    assert_string_equal(qp_ranges_get_meta(r)->method, "entropy");
    qp_ranges_free(r);
    qp_provider_free(p);
    p = NULL;
    assert_int_equal(qp_provider_open_model(m, NULL, "x:3x5", NULL, &p, &err), QP_ERR_BAD_INPUT);
    assert_int_equal(qp_provider_open_model(m, NULL, "y:3x4", NULL, &p, &err), QP_ERR_BAD_INPUT);
    assert_int_equal(qp_provider_open_model(m, NULL, "x:", NULL, &p, &err), QP_ERR_USAGE);
    assert_int_equal(qp_provider_open_model(m, "/no/such/file.npz", NULL, NULL, &p, &err),
                     QP_ERR_IO);
    assert_null(p);
    qp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(callback_provider_passes),
        cmocka_unit_test(callback_provider_bad),
        cmocka_unit_test(head_provider_stops_at_the_count),
        cmocka_unit_test(calibrate_max_from_memory),
        cmocka_unit_test(open_model_synthetic_and_bad_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
