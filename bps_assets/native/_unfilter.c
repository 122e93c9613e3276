/*
 * Packed-section filters undone in one native pass, called through ctypes (GIL released):
 * byte unshuffle, then the wrap-around delta along axis 0, optionally straight to float32
 * through a per-column affine map (dequantization) or with an index range check; and the
 * sections' CRC-32 (below). See bps_assets/container.py, whose numpy ``_undo_filter`` (and
 * transforms/quantize.py ``dequantize``) this reproduces bit for bit.
 *
 * Why: after decompression these passes were ~8 ms of a 600K-triangle scene's ~29 ms load in
 * numpy (several full passes and temporaries); here the work goes block by block through L1:
 * a vectorizable unshuffle, then the delta with the running row in registers.
 *
 * Every length comes from the caller; each is checked against the others before any access
 * (-1 on a mismatch: nothing is written).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define WIDE __attribute__((target_clones("avx2", "default"))) /* AVX2 where the CPU has it */
#else
#define WIDE
#endif

#define BLOCK 4096 /* elements per block: 16-32 KiB of output, stays in L1/L2 */
#define MAX_ROW 64  /* widest row (elements) the dequantizing pass accepts */

/* dst[0 .. m) (item bytes each): elements a .. a + m of the item byte planes of length n. */
WIDE static void unshuffle_range(const uint8_t *src, int64_t n, int64_t item, uint8_t *dst, int64_t a, int64_t m) {
    src += a;
    if (item == 1) {
        memcpy(dst, src, (size_t)m);
    } else if (item == 2) {
        const uint8_t *p0 = src, *p1 = src + n;
        uint16_t *o = (uint16_t *)dst;
        for (int64_t i = 0; i < m; i++) o[i] = (uint16_t)(p0[i] | (p1[i] << 8));
    } else if (item == 4) {
        const uint8_t *p0 = src, *p1 = src + n, *p2 = src + 2 * n, *p3 = src + 3 * n;
        uint32_t *o = (uint32_t *)dst;
        for (int64_t i = 0; i < m; i++)
            o[i] = (uint32_t)p0[i] | ((uint32_t)p1[i] << 8) | ((uint32_t)p2[i] << 16) | ((uint32_t)p3[i] << 24);
    } else { /* 8 */
        uint64_t *o = (uint64_t *)dst;
        for (int64_t i = 0; i < m; i++) {
            uint64_t v = 0;
            for (int64_t j = 0; j < 8; j++) v |= (uint64_t)src[j * n + i] << (8 * j);
            o[i] = v;
        }
    }
}

/* In place over elements [a, b) (a multiple of row): x[i] += x[i - row], wrapping; the first
 * row of the array (i < row) is kept. Rows of 1-4 elements get their own copy with the running
 * row in registers (the generic loop reloads x[i - row]: store-to-load latency per element). */
#define DELTA(T)                                                                            \
    static inline __attribute__((always_inline)) void delta_k_##T(T *x, int64_t row, int64_t i, int64_t b) { \
        T r[4];                                                                             \
        for (int64_t k = 0; k < row; k++) r[k] = x[i - row + k];                            \
        for (; i < b; i += row)                                                             \
            for (int64_t k = 0; k < row; k++) x[i + k] = r[k] = (T)(r[k] + x[i + k]);      \
    }                                                                                       \
    static void delta_##T(T *x, int64_t row, int64_t a, int64_t b) {                        \
        int64_t i = a < row ? row : a;                                                      \
        if (i >= b) return;                                                                 \
        switch (row) {                                                                      \
        case 1: delta_k_##T(x, 1, i, b); break;                                             \
        case 2: delta_k_##T(x, 2, i, b); break;                                             \
        case 3: delta_k_##T(x, 3, i, b); break;                                             \
        case 4: delta_k_##T(x, 4, i, b); break;                                             \
        default:                                                                            \
            for (; i < b; i++) x[i] = (T)(x[i] + x[i - row]);                               \
        }                                                                                   \
    }
DELTA(uint8_t)
DELTA(uint16_t)
DELTA(uint32_t)
DELTA(uint64_t)

static void delta_range(uint8_t *dst, int64_t item, int64_t row, int64_t a, int64_t b) {
    switch (item) {
    case 1: delta_uint8_t(dst, row, a, b); break;
    case 2: delta_uint16_t((uint16_t *)dst, row, a, b); break;
    case 4: delta_uint32_t((uint32_t *)dst, row, a, b); break;
    default: delta_uint64_t((uint64_t *)dst, row, a, b); break;
    }
}

/* Whether some element of [a, b), read as unsigned item-byte integers, is >= below: a compare
 * and an OR per element (vectorizes; a running max did not, without SSE4.1's unsigned max). */
#define ANY_GE(T)                                                                            \
    WIDE static int any_ge_##T(const T *x, int64_t a, int64_t b, uint64_t below) {                \
        if (below > (uint64_t)(T)~(T)0) return 0;                                            \
        T lim = (T)below, bad = 0;                                                           \
        for (int64_t i = a; i < b; i++) bad |= (T)(x[i] >= lim);                             \
        return bad != 0;                                                                     \
    }
ANY_GE(uint8_t)
ANY_GE(uint16_t)
ANY_GE(uint32_t)
ANY_GE(uint64_t)

static int any_ge(const uint8_t *dst, int64_t item, int64_t a, int64_t b, uint64_t below) {
    switch (item) {
    case 1: return any_ge_uint8_t(dst, a, b, below);
    case 2: return any_ge_uint16_t((const uint16_t *)dst, a, b, below);
    case 4: return any_ge_uint32_t((const uint32_t *)dst, a, b, below);
    default: return any_ge_uint64_t((const uint64_t *)dst, a, b, below);
    }
}

static int bad_shape(int64_t src_len, int64_t n, int64_t item, int64_t row) {
    if (item != 1 && item != 2 && item != 4 && item != 8) return 1;
    if (n < 0 || row < 1 || src_len < 0 || n > INT64_MAX / 8) return 1;
    return src_len != n * item || n % row != 0;
}

/* Undo "shuffle" (delta = 0) or "delta+shuffle" (delta = 1) of n elements of item bytes, rows of
 * ``row`` elements: src (src_len bytes) -> dst (n * item bytes, aligned to item). below >= 0: a
 * range check while each block is in cache, -2 (after the whole pass) when some element, read
 * as unsigned, is >= below. */
int bps_unfilter(const uint8_t *src, int64_t src_len, uint8_t *dst, int64_t n, int64_t item, int64_t row,
                 int32_t delta, int64_t below) {
    if (bad_shape(src_len, n, item, row)) return -1;
    int out_of_range = 0;
    int64_t step = (BLOCK / row) * row; /* blocks of whole rows */
    if (step < row) step = row;
    for (int64_t a = 0; a < n; a += step) {
        int64_t b = n - a < step ? n : a + step;
        unshuffle_range(src, n, item, dst + a * item, a, b - a);
        if (delta) delta_range(dst, item, row, a, b);
        if (below >= 0) out_of_range |= any_ge(dst, item, a, b, (uint64_t)below);
    }
    return out_of_range ? -2 : 0;
}

/* out[r * row + k] = (float)(c[r * row + k] * step[k] + origin[k]) for m elements (whole rows). */
#define AFFINE(T)                                                                            \
    static inline __attribute__((always_inline)) void affine_k_##T(const T *c, int64_t m, int64_t row, \
                                                                  const double *step, const double *origin, float *out) { \
        for (int64_t r = 0; r < m; r += row)                                                 \
            for (int64_t k = 0; k < row; k++) out[r + k] = (float)((double)c[r + k] * step[k] + origin[k]); \
    }                                                                                        \
    WIDE static void affine_##T(const T *c, int64_t m, int64_t row, const double *step, const double *origin, \
                           float *out) {                                                     \
        switch (row) {                                                                       \
        case 2: affine_k_##T(c, m, 2, step, origin, out); break;                             \
        case 3: affine_k_##T(c, m, 3, step, origin, out); break;                             \
        default: affine_k_##T(c, m, row, step, origin, out);                                 \
        }                                                                                    \
    }
AFFINE(uint16_t)
AFFINE(uint32_t)

/* As bps_unfilter for 2- or 4-byte unsigned codes, then out[i] = (float)(code * step[k] +
 * origin[k]) in double (k = i % row): numpy's float64 formula, rounded once, the same bits.
 * Codes never leave this block's buffer (L1), after the previous block's last row. */
int bps_unfilter_dequant(const uint8_t *src, int64_t src_len, float *out, int64_t n, int64_t item, int64_t row,
                         int32_t delta, const double *step, const double *origin) {
    if ((item != 2 && item != 4) || row > MAX_ROW || bad_shape(src_len, n, item, row)) return -1;
    uint32_t buf[BLOCK + MAX_ROW]; /* 4-byte aligned for either code width */
    int64_t blk = (BLOCK / row) * row;
    for (int64_t a = 0; a < n; a += blk) {
        int64_t b = n - a < blk ? n : a + blk, m = b - a;
        uint8_t *c = (uint8_t *)buf + row * item; /* c[-row .. -1]: the previous block's last row */
        unshuffle_range(src, n, item, c, a, m);
        if (delta && item == 2)
            a ? delta_uint16_t((uint16_t *)c - row, row, row, m + row) : delta_uint16_t((uint16_t *)c, row, 0, m);
        else if (delta)
            a ? delta_uint32_t((uint32_t *)c - row, row, row, m + row) : delta_uint32_t((uint32_t *)c, row, 0, m);
        if (item == 2)
            affine_uint16_t((const uint16_t *)c, m, row, step, origin, out + a);
        else
            affine_uint32_t((const uint32_t *)c, m, row, step, origin, out + a);
        memmove(buf, c + (m - row) * item, (size_t)(row * item));
    }
    return 0;
}

/* ---- CRC-32 (zlib's: reflected 0xEDB88320, inverted in and out) of the stored bytes ----
 * zlib.crc32 ran at ~7 GB/s here, ~2 ms of a 12 MB scene; carry-less multiplication folds 64
 * bytes per step instead (the method of Intel's "Fast CRC Computation for Generic Polynomials
 * Using PCLMULQDQ"). x86-64 with PCLMULQDQ only; elsewhere bps_crc32_available() is 0 and the
 * caller keeps zlib. */
static uint32_t crc_table[256];

static uint32_t crc_bytes(uint32_t reg, const uint8_t *p, int64_t n) { /* raw register, no inversion */
    for (int64_t i = 0; i < n; i++) reg = crc_table[(reg ^ p[i]) & 0xff] ^ (reg >> 8);
    return reg;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* reflect32(x^n mod P) << 1 for the fold distances: 4 x 128 bits +- 32 (64-byte steps), 128 +- 32
 * (16-byte steps); recomputed from the polynomial by tests/test_packed_scene_load.py. */
#define K_544 0x154442bd4ULL
#define K_480 0x1c6e41596ULL
#define K_160 0x1751997d0ULL
#define K_96 0x0ccaa009eULL

__attribute__((target("pclmul,sse2"))) static inline __m128i fold(__m128i x, __m128i k, __m128i next) {
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next);
}

/* The raw register after p[0 .. n), n >= 64, from register reg: the data is folded down to 16
 * bytes that leave the same register (the CRC is linear), and those go through the table. */
__attribute__((target("pclmul,sse2"))) static uint32_t crc_clmul(uint32_t reg, const uint8_t *p, int64_t n) {
    __m128i x0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_cvtsi32_si128((int)reg));
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 48));
    const __m128i k4 = _mm_set_epi64x((long long)K_480, (long long)K_544);
    const __m128i k1 = _mm_set_epi64x((long long)K_96, (long long)K_160);
    p += 64;
    n -= 64;
    for (; n >= 64; p += 64, n -= 64) {
        x0 = fold(x0, k4, _mm_loadu_si128((const __m128i *)p));
        x1 = fold(x1, k4, _mm_loadu_si128((const __m128i *)(p + 16)));
        x2 = fold(x2, k4, _mm_loadu_si128((const __m128i *)(p + 32)));
        x3 = fold(x3, k4, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    x0 = fold(fold(fold(x0, k1, x1), k1, x2), k1, x3);
    for (; n >= 16; p += 16, n -= 16) x0 = fold(x0, k1, _mm_loadu_si128((const __m128i *)p));
    uint8_t last[16];
    _mm_storeu_si128((__m128i *)last, x0);
    return crc_bytes(crc_bytes(0, last, 16), p, n);
}

static int clmul_ok = -1;

int bps_crc32_available(void) {
    if (clmul_ok < 0) { /* the table, then a self-test of the folding against it */
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
            crc_table[i] = c;
        }
        int ok = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse2");
        if (ok) {
            uint8_t t[1000];
            for (int i = 0; i < 1000; i++) t[i] = (uint8_t)(i * 131 + 7);
            for (int n = 64; n <= 1000 && ok; n += 37) ok = crc_clmul(0x12345678u, t, n) == crc_bytes(0x12345678u, t, n);
        }
        clmul_ok = ok;
    }
    return clmul_ok;
}

/* zlib.crc32(buf[:n], crc); only after bps_crc32_available() returned 1. */
uint32_t bps_crc32(uint32_t crc, const uint8_t *buf, int64_t n) {
    if (n < 0) return 0;
    uint32_t reg = ~crc;
    reg = n >= 64 ? crc_clmul(reg, buf, n) : crc_bytes(reg, buf, n);
    return ~reg;
}
#else
int bps_crc32_available(void) { return 0; }
uint32_t bps_crc32(uint32_t crc, const uint8_t *buf, int64_t n) { (void)buf; (void)n; return crc; }
#endif

static struct PyModuleDef unfilter_module = {
    PyModuleDef_HEAD_INIT, .m_name = "_unfilter", .m_doc = "ctypes-loaded section unfilter (see the C source)",
    .m_size = -1};

PyMODINIT_FUNC PyInit__unfilter(void) { return PyModule_Create(&unfilter_module); }
