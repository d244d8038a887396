/* The seed's update and a streamed step's metrics, each in one pass over its tensors (float32,
   CPU). Reached only through reluexp_fast/__init__.py, which checks every tensor before passing
   its address.

   At the reference size an op costs more in dispatch than in arithmetic, and the torch ops
   each read the whole tensor again: the update (w -= lr * g, two ops), a gradient's and a
   weight's squared norm (one dot product each), a hidden layer's nonzero count and per-unit
   extremes (three reductions). Here a weight is read and written once, a hidden layer read once.

   The update stays bit-identical to torch's: lr * g is rounded to float, then w - that is
   rounded (built with -ffp-contract=off: no fused multiply-add). Squares are taken exactly in
   double (a float's square fits in a double's mantissa) and summed in double: the torch path's
   float32 dot products agree to float32's rounding. The work is split over the OpenMP threads
   of the runtime torch loaded, in equal ranges of at least 32768 elements: torch's elementwise
   ops split a tensor so too, and each core then updates the part of a weight that the next
   step's matmuls expect in its cache. The split decides speed only: the update is
   elementwise, and the sums agree to double precision in any order. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
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

/* A hidden layer, pre and post (rows x units, row-major): pre's nonzero count, and how many
   units have a nonzero activation in some row (NaN included: a diverging run's units are not
   dead; -0.0 is zero). */
WIDEST_VECTORS
static void layer_counts(const float *pre, const float *post, size_t rows, size_t units,
                         size_t *nonzero, size_t *alive) {
    size_t count = 0;
    for (size_t i = 0; i < rows * units; i++) count += pre[i] != 0;
    size_t live = 0;
    for (size_t j = 0; j < units; j++) {
        size_t r = 0;
        while (r < rows && post[r * units + j] == 0) r++;
        live += r < rows;
    }
    *nonzero = count;
    *alive = live;
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
    unsigned long long w, g;
    Py_ssize_t n;
    double lr;
    if (!PyArg_ParseTuple(args, "KKnd", &w, &g, &n, &lr)) return NULL;
    double grad_sq, weight_sq;
    Py_BEGIN_ALLOW_THREADS
    update_and_norms((float *)(uintptr_t)w, (const float *)(uintptr_t)g, (size_t)n, (float)lr,
                     &grad_sq, &weight_sq);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("dd", grad_sq, weight_sq);
}

static PyObject *py_layer_counts(PyObject *Py_UNUSED(self), PyObject *args) {
    unsigned long long pre, post;
    Py_ssize_t rows, units;
    if (!PyArg_ParseTuple(args, "KKnn", &pre, &post, &rows, &units)) return NULL;
    size_t nonzero, alive;
    Py_BEGIN_ALLOW_THREADS
    layer_counts((const float *)(uintptr_t)pre, (const float *)(uintptr_t)post, (size_t)rows,
                 (size_t)units, &nonzero, &alive);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("nn", (Py_ssize_t)nonzero, (Py_ssize_t)alive);
}

static PyMethodDef methods[] = {
    {"update_and_norms", py_update_and_norms, METH_VARARGS,
     "update_and_norms(w, g, n, lr) -> (grad_sq, weight_sq): w -= lr * g (float32 addresses, "
     "n elements), with the squared norms of g and of the updated w. Addresses unchecked: call "
     "reluexp_fast.update_and_norms."},
    {"layer_counts", py_layer_counts, METH_VARARGS,
     "layer_counts(pre, post, rows, units) -> (nonzero, alive): pre's nonzero count and post's "
     "live units. Addresses unchecked: call reluexp_fast.layer_counts."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernel", NULL, -1, methods};

PyMODINIT_FUNC PyInit__kernel(void) { return PyModule_Create(&module); }
