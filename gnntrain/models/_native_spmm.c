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
#include <stdlib.h>

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

/* The dropout keep mask of gnntrain.models.gnn.row_hash_keep_mask, bit for bit: entry (r, c) of an
 * n x width byte mask (0/1, torch.bool's layout) is kept when the hash of (row key of rows[r], column key
 * of c) read as a signed 32-bit value is at or above threshold. The keys are SplitMix64's finaliser of
 * (id * golden + stream), high 32 bits; the entry hash one multiply-xorshift-multiply round. Unsigned
 * arithmetic here wraps exactly as torch's int64/int32 tensors do. One pass writing n * width bytes
 * instead of torch's six over 32-bit temporaries. Returns 0, or -1 where the column keys find no memory. */
static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

int gnntrain_keep_mask(const int64_t *rows, int64_t n, int64_t width, int64_t stream, int64_t threshold,
                       uint8_t *out, int threads) {
    uint32_t *col_key = malloc((size_t)(width > 0 ? width : 1) * sizeof(uint32_t));
    if (col_key == NULL) return -1;
    for (int64_t c = 0; c < width; c++)
        col_key[c] = (uint32_t)(mix64((uint64_t)c * 0xD1B54A32D192ED03ULL + ((uint64_t)stream ^ 0x5BD1E995ULL)) >> 32);
    /* a cut above every 32-bit value keeps nothing; otherwise compare in 32 bits (what vectorizes) */
    const int none_kept = threshold > INT32_MAX;
    const int32_t cut = threshold < INT32_MIN ? INT32_MIN : (none_kept ? INT32_MAX : (int32_t)threshold);
    _Pragma("omp parallel for schedule(static) num_threads(threads)")
    for (int64_t r = 0; r < n; r++) {
        const uint32_t row_key = (uint32_t)(mix64((uint64_t)rows[r] * 0x9E3779B97F4A7C15ULL + (uint64_t)stream) >> 32);
        uint8_t *o = out + r * width;
        for (int64_t c = 0; c < width; c++) {
            uint32_t x = (row_key ^ col_key[c]) * 0x7FEB352DU;
            x ^= x >> 15;
            x *= 0x846CA68BU;
            o[c] = !none_kept & ((int32_t)x >= cut);
        }
    }
    free(col_key);
    return 0;
}
