/* SuperGCN's CPU halo operators (SuperGCN §2, "Single processor optimizations" and "Quantization of
 * communication to Int2"; docs/design.md#supergcn), compiled into the same library as _native_spmm.c.
 *
 * 1. quantise + pack in one pass per row: min/max, the row's (scale, zero point) rounded into the
 *    parameter format (zero down, scale up), (x - Z')/S + U, floor, clamp, pack b-bit codes little end
 *    first; threads take blocks of rows. U's bits are torch's draws, handed in (raw int16 lanes, masked
 *    to 15 bits here), so the codes are gnntrain.comm.quantize's torch path's, bit for bit.
 * 2. unpack + dequantise in one pass per row: code * S + Z in the rows' dtype.
 * 3. the post-aggregation as a sorted, clustered index_add: out[v] = base[v] + d[v] * sum of the received
 *    rows listed for v, contributions sorted by destination (then by received row), so each destination
 *    row is written by one thread (no atomics) and summed in one fixed order. Work is split in two
 *    dimensions (SuperGCN's "2D dynamic parallelism"): row chunks balanced by their flops, times column
 *    blocks of BLOCK features kept in registers, taken dynamically.
 *
 * Every operation is IEEE in the rows' dtype with no contraction (FLAGS has -ffp-contract=off), in the
 * order torch's formulas use, so results do not depend on the thread count or on which side ran. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ROWS_PER_BLOCK 64    /* quantiser rows per static OpenMP chunk */
#define LANES 16             /* independent min/max lanes (vectorizable, no reduction reassociation) */
#define SCATTER_CHUNK 4096   /* target contributions + rows per scatter row chunk */
#define PREFETCH_AHEAD 16    /* contributions ahead whose source rows are asked for */

/* A parameter format: mantissa bits, least normal exponent, largest finite value. */
typedef struct { int mant; int emin; double max; } Format;
static const Format FORMATS[3] = {{7, -126, 0x1.FEp127},       /* bfloat16 */
                                  {10, -14, 0x1.FFCp15},       /* float16 */
                                  {23, -126, 0x1.FFFFFEp127}}; /* float32 */

/* The largest value of format f at or below v (up = 0), or the smallest at or above it (up = 1): what
 * quantize._round_toward computes (nearest, then one step back where it went the wrong way). */
static double to_format(double v, const Format *f, int up) {
    if (v != v || v == 0 || isinf(v)) return v;
    int e;
    frexp(v, &e); /* |v| in [2^(e-1), 2^e) */
    const int lead = e - 1 < f->emin ? f->emin : e - 1;
    const double ulp = ldexp(1.0, lead - f->mant);
    double r = (up ? ceil(v / ulp) : floor(v / ulp)) * ulp; /* exact: powers of two */
    if (r > f->max) r = up ? INFINITY : f->max;
    if (r < -f->max) r = up ? -f->max : -INFINITY;
    return r;
}

static inline void prefetch_row(const void *row, int64_t bytes) {
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch((const char *)row + b, 0, 3);
}

/* codes[0, d) → one packed row of ceil(d * bits / 8) bytes (codes[d, d + 8) must be zero). */
static inline void pack_row(const uint8_t *codes, int64_t d, int bits, uint8_t *out) {
    const int64_t bytes = (d * bits + 7) / 8;
    switch (bits) {
    case 8: memcpy(out, codes, (size_t)d); break;
    case 4: for (int64_t j = 0; j < bytes; j++) out[j] = codes[2 * j] | (uint8_t)(codes[2 * j + 1] << 4); break;
    case 2:
        for (int64_t j = 0; j < bytes; j++)
            out[j] = codes[4 * j] | (uint8_t)(codes[4 * j + 1] << 2) | (uint8_t)(codes[4 * j + 2] << 4)
                     | (uint8_t)(codes[4 * j + 3] << 6);
        break;
    default: /* 1 */
        for (int64_t j = 0; j < bytes; j++) {
            uint8_t byte = 0;
            for (int s = 0; s < 8; s++) byte |= (uint8_t)(codes[8 * j + s] << s);
            out[j] = byte;
        }
    }
}

/* One packed row → codes[0, d). */
static inline void unpack_row(const uint8_t *p, int64_t d, int bits, uint8_t *codes) {
    switch (bits) {
    case 8: memcpy(codes, p, (size_t)d); break;
    case 4: for (int64_t c = 0; c < d; c++) codes[c] = (p[c >> 1] >> ((c & 1) * 4)) & 15; break;
    case 2: for (int64_t c = 0; c < d; c++) codes[c] = (p[c >> 2] >> ((c & 3) * 2)) & 3; break;
    default: for (int64_t c = 0; c < d; c++) codes[c] = (p[c >> 3] >> (c & 7)) & 1;
    }
}

/* NAME(x, x_stride, noise, n, d, bits, param_kind, packed, packed_stride, params, threads): rows [0, n) of
 * x (d wide) → packed codes and params[r] = (scale, zero point) as floats (exact in every parameter
 * format). noise holds n * d raw int16 lanes, row-major. Returns 0, or -1 where no buffer could be had. */
#define QUANTIZE(NAME, T, FLOOR)                                                                        \
    int NAME(const T *x, int64_t x_stride, const int16_t *noise, int64_t n, int64_t d, int bits,          \
             int param_kind, uint8_t *packed, int64_t packed_stride, float *params, int threads) {       \
        const Format *f = &FORMATS[param_kind];                                                         \
        const T levels = (T)((1 << bits) - 1), tiny = (T)ldexp(1.0, f->emin), step = (T)0x1p-15;         \
        uint8_t *buffers = calloc((size_t)threads, (size_t)(d + 8));                                    \
        if (buffers == NULL) return -1;                                                                 \
        const int64_t blocks = (n + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;                               \
        _Pragma("omp parallel for schedule(static) num_threads(threads)")                               \
        for (int64_t blk = 0; blk < blocks; blk++) {                                                    \
            uint8_t *codes = buffers + (int64_t)omp_get_thread_num() * (d + 8);                         \
            const int64_t end = (blk + 1) * ROWS_PER_BLOCK < n ? (blk + 1) * ROWS_PER_BLOCK : n;        \
            for (int64_t r = blk * ROWS_PER_BLOCK; r < end; r++) {                                      \
                const T *xr = x + r * x_stride;                                                         \
                const int16_t *ur = noise + r * d;                                                      \
                T lo[LANES], hi[LANES];                                                                 \
                int nan = 0;                                                                            \
                for (int l = 0; l < LANES; l++) lo[l] = hi[l] = xr[0];                                  \
                int64_t c = 0;                                                                          \
                for (; c + LANES <= d; c += LANES)                                                      \
                    for (int l = 0; l < LANES; l++) {                                                   \
                        const T v = xr[c + l];                                                          \
                        lo[l] = v < lo[l] ? v : lo[l];                                                  \
                        hi[l] = v > hi[l] ? v : hi[l];                                                  \
                        nan |= v != v;                                                                  \
                    }                                                                                   \
                for (; c < d; c++) {                                                                    \
                    const T v = xr[c];                                                                  \
                    lo[0] = v < lo[0] ? v : lo[0];                                                      \
                    hi[0] = v > hi[0] ? v : hi[0];                                                      \
                    nan |= v != v;                                                                      \
                }                                                                                       \
                T mn = lo[0], mx = hi[0];                                                               \
                for (int l = 1; l < LANES; l++) {                                                       \
                    mn = lo[l] < mn ? lo[l] : mn;                                                       \
                    mx = hi[l] > mx ? hi[l] : mx;                                                       \
                }                                                                                       \
                if (nan) mn = mx = (T)NAN;                                                              \
                /* Z down, S = max(spread / levels, tiny) up, both in the parameter format */           \
                const double zero = to_format((double)mn, f, 0);                                        \
                const T z = (T)zero;                                                                    \
                T q = (T)(mx - z) / levels;                                                             \
                q = q < tiny ? tiny : q;                                                                \
                const double scale = to_format((double)q, f, 1);                                        \
                const T s = (T)scale;                                                                   \
                const T zh = (T)((double)z - (double)s * 0x1p-16); /* the noise's half step */           \
                params[2 * r] = (float)scale;                                                           \
                params[2 * r + 1] = (float)zero;                                                        \
                for (c = 0; c < d; c++) {                                                               \
                    T v = FLOOR((xr[c] - zh) / s + (T)(ur[c] & 0x7FFF) * step);                         \
                    v = v < 0 ? 0 : v;                                                                  \
                    v = v > levels ? levels : v;                                                        \
                    codes[c] = (uint8_t)v;                                                              \
                }                                                                                       \
                pack_row(codes, d, bits, packed + r * packed_stride);                                   \
            }                                                                                           \
        }                                                                                               \
        free(buffers);                                                                                  \
        return 0;                                                                                       \
    }

QUANTIZE(gnntrain_quantize_f32, float, floorf)
QUANTIZE(gnntrain_quantize_f64, double, floor)

/* NAME(packed, packed_stride, params, n, d, bits, out, out_stride, threads): params[r] = (scale, zero
 * point) in the rows' dtype; out[r, c] = code * scale + zero. Returns 0, or -1 without a buffer. */
#define DEQUANTIZE(NAME, T)                                                                             \
    int NAME(const uint8_t *packed, int64_t packed_stride, const T *params, int64_t n, int64_t d, int bits, \
             T *out, int64_t out_stride, int threads) {                                                 \
        uint8_t *buffers = malloc((size_t)threads * (size_t)(d + 8));                                   \
        if (buffers == NULL) return -1;                                                                 \
        const int64_t blocks = (n + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;                               \
        _Pragma("omp parallel for schedule(static) num_threads(threads)")                               \
        for (int64_t blk = 0; blk < blocks; blk++) {                                                    \
            uint8_t *codes = buffers + (int64_t)omp_get_thread_num() * (d + 8);                         \
            const int64_t end = (blk + 1) * ROWS_PER_BLOCK < n ? (blk + 1) * ROWS_PER_BLOCK : n;        \
            for (int64_t r = blk * ROWS_PER_BLOCK; r < end; r++) {                                      \
                const T s = params[2 * r], z = params[2 * r + 1];                                       \
                T *o = out + r * out_stride;                                                            \
                unpack_row(packed + r * packed_stride, d, bits, codes);                                 \
                for (int64_t c = 0; c < d; c++) o[c] = (T)codes[c] * s + z;                             \
            }                                                                                           \
        }                                                                                               \
        free(buffers);                                                                                  \
        return 0;                                                                                       \
    }

DEQUANTIZE(gnntrain_dequantize_f32, float)
DEQUANTIZE(gnntrain_dequantize_f64, double)

/* Row chunk boundaries (chunks + 1 entries) with about equal contributions + rows each. */
static int64_t *row_chunks(const int64_t *indptr, int64_t n, int threads, int64_t *count) {
    const int64_t total = indptr[n] - indptr[0] + n;
    int64_t k = (total + SCATTER_CHUNK - 1) / SCATTER_CHUNK;
    if (k < 4 * (int64_t)threads) k = 4 * (int64_t)threads;
    if (k > n) k = n;
    if (k < 1) k = 1;
    int64_t *bounds = malloc((size_t)(k + 1) * sizeof(int64_t));
    if (bounds == NULL) return NULL;
    bounds[0] = 0;
    for (int64_t i = 1; i < k; i++) { /* the first row v with (indptr[v] - indptr[0]) + v >= i * total / k */
        const int64_t goal = (int64_t)((double)total * i / k);
        int64_t a = bounds[i - 1], b = n;
        while (a < b) {
            const int64_t m = a + (b - a) / 2;
            if (indptr[m] - indptr[0] + m < goal) a = m + 1; else b = m;
        }
        bounds[i] = a;
    }
    bounds[k] = n;
    *count = k;
    return bounds;
}

/* NAME(indptr, rows, dst_scale, base, base_stride, src, src_stride, out, out_stride, n, width, threads):
 * out[v] = base[v] + dst_scale[v] * sum_{e in [indptr[v], indptr[v+1])} src[rows[e]] (dst_scale NULL:
 * no factor), summed in e's order. Returns 0, or -1 without memory for the chunk table. */
#define SCATTER(NAME, T, I, BLOCK)                                                                      \
    int NAME(const int64_t *indptr, const I *rows, const T *dst_scale, const T *base, int64_t base_stride, \
             const T *src, int64_t src_stride, T *out, int64_t out_stride, int64_t n, int64_t width,      \
             int threads) {                                                                             \
        int64_t chunks = 0;                                                                             \
        int64_t *bounds = row_chunks(indptr, n, threads, &chunks);                                      \
        if (bounds == NULL) return -1;                                                                  \
        const int64_t col_blocks = (width + BLOCK - 1) / BLOCK, tasks = chunks * col_blocks;            \
        const int64_t edge_end = indptr[n];                                                             \
        _Pragma("omp parallel for schedule(dynamic, 1) num_threads(threads)")                           \
        for (int64_t t = 0; t < tasks; t++) {                                                           \
            const int64_t k0 = (t % col_blocks) * BLOCK;                                                \
            const int64_t nb = width - k0 < BLOCK ? width - k0 : BLOCK;                                 \
            for (int64_t v = bounds[t / col_blocks]; v < bounds[t / col_blocks + 1]; v++) {             \
                const int64_t start = indptr[v], end = indptr[v + 1];                                   \
                const T *b = base + v * base_stride + k0;                                               \
                T *o = out + v * out_stride + k0;                                                       \
                T acc[BLOCK];                                                                           \
                for (int k = 0; k < BLOCK; k++) acc[k] = 0;                                             \
                if (nb == BLOCK) {                                                                      \
                    for (int64_t e = start; e < end; e++) {                                             \
                        if (e + PREFETCH_AHEAD < edge_end)                                              \
                            prefetch_row(src + rows[e + PREFETCH_AHEAD] * src_stride + k0,              \
                                         BLOCK * (int64_t)sizeof(T));                                   \
                        const T *s = src + (int64_t)rows[e] * src_stride + k0;                          \
                        for (int k = 0; k < BLOCK; k++) acc[k] += s[k];                                 \
                    }                                                                                   \
                    if (dst_scale != NULL) {                                                            \
                        const T d = dst_scale[v];                                                       \
                        for (int k = 0; k < BLOCK; k++) o[k] = b[k] + acc[k] * d;                       \
                    } else {                                                                            \
                        for (int k = 0; k < BLOCK; k++) o[k] = b[k] + acc[k];                           \
                    }                                                                                   \
                } else {                                                                                \
                    for (int64_t e = start; e < end; e++) {                                             \
                        const T *s = src + (int64_t)rows[e] * src_stride + k0;                          \
                        for (int64_t k = 0; k < nb; k++) acc[k] += s[k];                                \
                    }                                                                                   \
                    const T d = dst_scale != NULL ? dst_scale[v] : (T)1;                                \
                    for (int64_t k = 0; k < nb; k++) o[k] = b[k] + acc[k] * d;                          \
                }                                                                                       \
            }                                                                                           \
        }                                                                                               \
        free(bounds);                                                                                   \
        return 0;                                                                                       \
    }

SCATTER(gnntrain_scatter_f32_i32, float, int32_t, 64)
SCATTER(gnntrain_scatter_f32_i64, float, int64_t, 64)
SCATTER(gnntrain_scatter_f64_i32, double, int32_t, 32)
SCATTER(gnntrain_scatter_f64_i64, double, int64_t, 32)
