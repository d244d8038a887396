/* The seed's update and a step's metrics, each in one pass over its tensors (float32, CPU).
   Reached only through reluexp/fused.py, which checks every tensor before passing its address.

   At the reference size an op costs more in dispatch than in arithmetic, and the torch ops
   each read the whole tensor again: the update (w -= lr * g, two ops), a gradient's and a
   weight's norm (one reduction each), a hidden layer's nonzero count and per-unit extremes
   (three reductions). Here a weight is read and written once, a hidden layer read once.

   The update stays bit-identical to torch's: lr * g is rounded to float, then w - that is
   rounded (built with -ffp-contract=off: no fused multiply-add). Norms are those of
   reluexp.metrics' torch path: every square taken exactly in double (a float's square fits in
   a double's mantissa), summed in double, so the two agree far below float32's resolution
   whatever order each sums in. The work is split over the OpenMP threads of the runtime
   torch loaded (fused.py imports torch first), in equal ranges of at least 32768 elements:
   torch's elementwise ops split a tensor so too, and each core then updates the part of a
   weight that the next step's matmuls expect in its cache (measured: on one core the next
   forward and backward pay about 25 us at the reference size). The split decides speed only:
   the update is elementwise, and the sums agree to double precision in any order. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <omp.h>

#define LANES 8
typedef float floats_t __attribute__((vector_size(LANES * sizeof(float))));
typedef double doubles_t __attribute__((vector_size(LANES * sizeof(double))));

/* One build runs on any x86-64; each CPU takes the widest vectors it has at load time. */
#if defined(__x86_64__) && defined(__linux__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define WIDEST_VECTORS __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef WIDEST_VECTORS
#define WIDEST_VECTORS
#endif

static double lane_sum(doubles_t lanes) {
    double sum = 0;
    for (int k = 0; k < LANES; k++) sum += lanes[k];
    return sum;
}

/* w -= lr * g over one thread's range; *grad_sq = sum(g * g), *weight_sq = sum(w * w) of the
   updated w, both exact squares summed in double. */
WIDEST_VECTORS
static void update_range(float *w, const float *g, size_t n, float lr, double *grad_sq,
                         double *weight_sq) {
    doubles_t grad_acc = {0}, weight_acc = {0};
    size_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        floats_t gv, wv;
        memcpy(&gv, g + i, sizeof gv);
        memcpy(&wv, w + i, sizeof wv);
        wv = wv - gv * lr;
        memcpy(w + i, &wv, sizeof wv);
        doubles_t gd = __builtin_convertvector(gv, doubles_t);
        doubles_t wd = __builtin_convertvector(wv, doubles_t);
        grad_acc += gd * gd;
        weight_acc += wd * wd;
    }
    double grad_total = lane_sum(grad_acc), weight_total = lane_sum(weight_acc);
    for (; i < n; i++) {
        float updated = w[i] - g[i] * lr;
        w[i] = updated;
        grad_total += (double)g[i] * g[i];
        weight_total += (double)updated * updated;
    }
    *grad_sq = grad_total;
    *weight_sq = weight_total;
}

/* A hidden layer, pre and post (rows x units, row-major): pre's nonzero count, and each unit's
   largest and smallest activation over the rows (NaN wins, as in torch.amax and torch.amin). */
WIDEST_VECTORS
static size_t layer_counts(const float *pre, const float *post, size_t rows, size_t units,
                           float *unit_max, float *unit_min) {
    size_t nonzero = 0;
    for (size_t i = 0; i < rows * units; i++) nonzero += pre[i] != 0;
    if (rows == 0) return 0;
    memcpy(unit_max, post, units * sizeof(float));
    memcpy(unit_min, post, units * sizeof(float));
    for (size_t r = 1; r < rows; r++) {
        const float *row = post + r * units;
        for (size_t j = 0; j < units; j++) {
            float v = row[j];
            unit_max[j] = (v > unit_max[j] || v != v) ? v : unit_max[j];
            unit_min[j] = (v < unit_min[j] || v != v) ? v : unit_min[j];
        }
    }
    return nonzero;
}

#define MIN_ELEMENTS_PER_THREAD 32768

static void update_and_norms(float *w, const float *g, size_t n, float lr, double *grad_sq,
                             double *weight_sq) {
    size_t ranges = (n + MIN_ELEMENTS_PER_THREAD - 1) / MIN_ELEMENTS_PER_THREAD;
    int threads = omp_get_max_threads();
    if ((size_t)threads > ranges) threads = (int)ranges;
    if (threads < 1) threads = 1;
    double grad_total = 0, weight_total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : grad_total, weight_total)
    {
        size_t parts = (size_t)omp_get_num_threads();
        size_t chunk = (n + parts - 1) / parts;
        size_t begin = (size_t)omp_get_thread_num() * chunk;
        if (begin < n) {
            size_t end = begin + chunk < n ? begin + chunk : n;
            double gs, ws;
            update_range(w + begin, g + begin, end - begin, lr, &gs, &ws);
            grad_total += gs;
            weight_total += ws;
        }
    }
    *grad_sq = grad_total;
    *weight_sq = weight_total;
}

static PyObject *py_update_and_norms(PyObject *Py_UNUSED(self), PyObject *args) {
    unsigned long long w, g, grad_cell, weight_cell;
    Py_ssize_t n;
    double lr;
    if (!PyArg_ParseTuple(args, "KKndKK", &w, &g, &n, &lr, &grad_cell, &weight_cell))
        return NULL;
    double grad_sq, weight_sq;
    Py_BEGIN_ALLOW_THREADS
    update_and_norms((float *)(uintptr_t)w, (const float *)(uintptr_t)g, (size_t)n, (float)lr,
                     &grad_sq, &weight_sq);
    Py_END_ALLOW_THREADS
    *(double *)(uintptr_t)grad_cell = sqrt(grad_sq);
    *(double *)(uintptr_t)weight_cell = sqrt(weight_sq);
    Py_RETURN_NONE;
}

static PyObject *py_layer_counts(PyObject *Py_UNUSED(self), PyObject *args) {
    unsigned long long pre, post, max_cells, min_cells, nonzero_cell;
    Py_ssize_t rows, units;
    if (!PyArg_ParseTuple(args, "KKnnKKK", &pre, &post, &rows, &units, &max_cells, &min_cells,
                          &nonzero_cell))
        return NULL;
    size_t nonzero;
    Py_BEGIN_ALLOW_THREADS
    nonzero = layer_counts((const float *)(uintptr_t)pre, (const float *)(uintptr_t)post,
                           (size_t)rows, (size_t)units, (float *)(uintptr_t)max_cells,
                           (float *)(uintptr_t)min_cells);
    Py_END_ALLOW_THREADS
    *(double *)(uintptr_t)nonzero_cell = (double)nonzero;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"update_and_norms", py_update_and_norms, METH_VARARGS,
     "update_and_norms(w, g, n, lr, grad_cell, weight_cell): w -= lr * g (float32), with the "
     "norms of g and of the updated w written to the float64 cells. Addresses unchecked: call "
     "reluexp.fused.update_with_norms."},
    {"layer_counts", py_layer_counts, METH_VARARGS,
     "layer_counts(pre, post, rows, units, max_cells, min_cells, nonzero_cell): pre's nonzero "
     "count (a float64 cell) and post's per-unit max and min over the rows (float32 cells). "
     "Addresses unchecked: call reluexp.fused.layer_counts."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fused", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fused(void) { return PyModule_Create(&module); }
