/* The native kernel's C loops: out[v] = dst_scale[v] * sum_{e in row v} src_scale[col[e]] * h[col[e]]
 * (or sum of value[e] * h[col[e]] when the CSR carries edge values), over destination rows.
 *
 * Compiled at first use by gnntrain/models/_native_c.py with the system's C compiler
 * (-O3 -march=native -fopenmp) and loaded with ctypes; numba's loops (_native_loops.py) serve where
 * no compiler is found. Why C: the accumulator of a block of BLOCK features stays in vector registers
 * for all of a row's edges (numba keeps it in memory): about 0.6x numba's time at width 128 on a
 * random 300k-node graph here (docs/BENCHMARKS.md, kernels).
 *
 * Every row's sum runs over its edges in CSR order, for each feature on its own, so a result does not
 * depend on the thread count; the OpenMP runtime is torch's own libgomp where torch loaded it first,
 * and every call names its thread count. */
#include <stdint.h>

#define CACHE_LINE 64
#define PREFETCH_EDGES 16   /* how far ahead (in edges) a source row is asked for */
#define ROWS_PER_TASK 64    /* destination rows per dynamic OpenMP chunk */

/* Ask for the bytes [0, bytes) of a source row, a line at a time, PREFETCH_EDGES edges ahead. */
static inline void prefetch_row(const void *row, int64_t bytes) {
    for (int64_t b = 0; b < bytes; b += CACHE_LINE) __builtin_prefetch((const char *)row + b, 0, 3);
}

/* The factor of a source row: its column's scale (scaled) or the edge's value (weighted). */
#define EDGE_SCALE_scaled(e, u) (src_scale[u])
#define EDGE_SCALE_weighted(e, u) (values[e])

/* NAME(indptr, indices, src_scale|values, dst_scale, h, h_stride, out, out_stride, rows, width, threads):
 * rows [0, rows) of out from the CSR slice indptr[0..rows] (its edge ids index indices and values as they
 * are: a slice of a larger CSR keeps its offsets). BLOCK features per pass are summed in registers over
 * all of the row's edges, each pass asking ahead for its own lines of the rows (a constant count, which
 * measured faster than one request for the whole row); a last partial block takes the generic loop.
 * Strides are in elements. */
#define SPMM_KERNEL(NAME, T, I, BLOCK, KIND, SCALE_ARG)                                                  \
    void NAME(const int64_t *indptr, const I *indices, const T *SCALE_ARG, const T *dst_scale,        \
              const T *h, int64_t h_stride, T *out, int64_t out_stride, int64_t rows, int64_t width,   \
              int threads) {                                                                           \
        const int64_t edge_end = indptr[rows];                                                         \
        _Pragma("omp parallel for schedule(dynamic, ROWS_PER_TASK) num_threads(threads)")              \
        for (int64_t v = 0; v < rows; v++) {                                                           \
            const int64_t start = indptr[v], end = indptr[v + 1];                                      \
            const T d = dst_scale[v];                                                                  \
            T *o = out + v * out_stride;                                                               \
            for (int64_t k0 = 0; k0 < width; k0 += BLOCK) {                                            \
                const int64_t nb = width - k0 < BLOCK ? width - k0 : BLOCK;                            \
                if (nb == BLOCK) {                                                                     \
                    T acc[BLOCK];                                                                      \
                    for (int k = 0; k < BLOCK; k++) acc[k] = 0;                                        \
                    for (int64_t e = start; e < end; e++) {                                            \
                        if (e + PREFETCH_EDGES < edge_end) /* this pass's lines: a constant count */   \
                            prefetch_row(h + indices[e + PREFETCH_EDGES] * h_stride + k0,              \
                                         BLOCK * (int64_t)sizeof(T));                                  \
                        const int64_t u = indices[e];                                                  \
                        const T s = EDGE_SCALE_##KIND(e, u);                                           \
                        const T *hu = h + u * h_stride + k0;                                           \
                        for (int k = 0; k < BLOCK; k++) acc[k] += s * hu[k];                           \
                    }                                                                                  \
                    for (int k = 0; k < BLOCK; k++) o[k0 + k] = acc[k] * d;                            \
                } else {                                                                               \
                    for (int64_t k = 0; k < nb; k++) o[k0 + k] = 0;                                    \
                    for (int64_t e = start; e < end; e++) {                                            \
                        if (e + PREFETCH_EDGES < edge_end)                                             \
                            prefetch_row(h + indices[e + PREFETCH_EDGES] * h_stride + k0,              \
                                         nb * (int64_t)sizeof(T));                                     \
                        const int64_t u = indices[e];                                                  \
                        const T s = EDGE_SCALE_##KIND(e, u);                                           \
                        const T *hu = h + u * h_stride + k0;                                           \
                        for (int64_t k = 0; k < nb; k++) o[k0 + k] += s * hu[k];                       \
                    }                                                                                  \
                    for (int64_t k = 0; k < nb; k++) o[k0 + k] *= d;                                   \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
    }

/* BLOCK: 8 AVX2 registers of accumulators (64 floats, 32 doubles); the vectorizer picks the width. */
SPMM_KERNEL(gnntrain_scaled_f32_i32, float, int32_t, 64, scaled, src_scale)
SPMM_KERNEL(gnntrain_scaled_f32_i64, float, int64_t, 64, scaled, src_scale)
SPMM_KERNEL(gnntrain_scaled_f64_i32, double, int32_t, 32, scaled, src_scale)
SPMM_KERNEL(gnntrain_scaled_f64_i64, double, int64_t, 32, scaled, src_scale)
SPMM_KERNEL(gnntrain_weighted_f32_i32, float, int32_t, 64, weighted, values)
SPMM_KERNEL(gnntrain_weighted_f32_i64, float, int64_t, 64, weighted, values)
SPMM_KERNEL(gnntrain_weighted_f64_i32, double, int32_t, 32, weighted, values)
SPMM_KERNEL(gnntrain_weighted_f64_i64, double, int64_t, 32, weighted, values)
