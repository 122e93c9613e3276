/*
 * The policy's stem, relu(max_pool(conv(x), 3, 2, 1)) with a 3x3 stride-2 pad-1 convolution,
 * forward and the weight / bias gradient in one pass per frame, called through ctypes (GIL
 * released). bps_train/stem.py wraps it as an autograd function and states the contract; this
 * file only computes.
 *
 * Why: on the CPU the stem's 32x32 output (64 KiB per frame at width 16) was written by the
 * convolution, read by the max-pool, re-zeroed and scattered into by the pool's backward and read
 * again by the convolution's backward: ~23 % of a PPO update and ~16 % of a rollout's forward,
 * all memory traffic (docs/PERFORMANCE.md, "CPU learner, fourth pass"). Here the conv map of one
 * frame lives in a 64 KiB buffer that stays in L2, the pool keeps its window position as a byte,
 * and no input gradient is computed (the stem's input is an observation).
 *
 * Semantics kept from torch: the pool's window scan is row-major and takes the first strict
 * maximum (a NaN wins); relu keeps a value unless it is <= 0 (so NaN, and its gradient, pass).
 * Sizes come from the caller, which checks them (stem.py); -1 on inconsistent sizes.
 *
 * stem.py calls the kernel only on CPUs with AVX-512 (stem_wide): AVX-512 loops for one input
 * channel and channels in multiples of 16 (the policy's stem), portable loops, compiled for
 * x86-64-v4, for the other shapes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define WIDE __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define WIDE
#endif

#define MAX_COUT 256
#define MAX_TAPS 36 /* 9 x up to 4 input channels */
#define LANES 16   /* channels per register block (one AVX-512 vector) */
#define DEAD 255    /* window position of an output relu zeroed: no gradient */

/* conv output rows/cols for a 3x3 stride-2 pad-1 conv (and the pool's, which has the same shape) */
static int64_t half(int64_t n) { return (n - 1) / 2 + 1; }

typedef float vf __attribute__((vector_size(4 * LANES)));   /* LANES channels */

static inline vf load(const float *p) { vf v; memcpy(&v, p, sizeof v); return v; }
static inline void store(float *p, vf v) { memcpy(p, &v, sizeof v); }
static inline vf splat(float a) { return (vf){0} + a; }

/* x [H][W][C] into xp [H + 2][W + 2][C] with a zero border: the conv's padding, so that its
 * taps need no bounds checks. Returns 0 when every value is finite, else 1. */
WIDE static int pad_frame(const float *restrict x, int64_t h, int64_t w, int64_t cin, float *restrict xp) {
    const int64_t row = (w + 2) * cin;
    uint32_t bad = 0;
    memset(xp, 0, sizeof(float) * (size_t)row);
    memset(xp + (h + 1) * row, 0, sizeof(float) * (size_t)row);
    for (int64_t r = 0; r < h; r++) {
        float *restrict dst = xp + (r + 1) * row;
        const float *restrict src = x + r * w * cin;
        for (int64_t c = 0; c < cin; c++) dst[c] = 0.0f;
        for (int64_t k = 0; k < w * cin; k++) {
            uint32_t bits;
            memcpy(&bits, src + k, sizeof bits);
            bad |= (bits & 0x7f800000u) == 0x7f800000u;   /* exponent all ones: NaN or infinity */
            dst[cin + k] = src[k];
        }
        for (int64_t c = 0; c < cin; c++) dst[(w + 1) * cin + c] = 0.0f;
    }
    return bad != 0;
}

/* The conv map of one frame, y[i][j][co] (HWC, coutp channels: cout rounded up to LANES), from
 * the padded frame xp [H + 2][W + 2][C] and wt [taps][coutp] (zero-padded). Blocks of LANES
 * channels accumulate in one vector. */
WIDE static void conv_frame(const float *restrict xp, int64_t w, int64_t cin, const float *restrict wt,
                            const float *restrict bias, int64_t coutp, int64_t hc, int64_t wc, float *restrict y) {
    float patch[MAX_TAPS];
    const int64_t taps = 9 * cin, row = (w + 2) * cin;
    for (int64_t i = 0; i < hc; i++) {
        for (int64_t j = 0; j < wc; j++) {
            const float *restrict p0 = xp + 2 * i * row + 2 * j * cin;
            for (int64_t ci = 0; ci < cin; ci++)
                for (int64_t ky = 0; ky < 3; ky++)
                    for (int64_t kx = 0; kx < 3; kx++) patch[ci * 9 + ky * 3 + kx] = p0[ky * row + kx * cin + ci];
            for (int64_t c0 = 0; c0 < coutp; c0 += LANES) {
                vf acc = load(bias + c0);
                for (int64_t t = 0; t < taps; t++) acc += splat(patch[t]) * load(wt + t * coutp + c0);
                store(y + (i * wc + j) * coutp + c0, acc);
            }
        }
    }
}

/* Pool + relu of one frame's conv map into out [hp][wp][cout] and the window positions pos
 * (through ob / pb: the same with coutp channels; pos NULL: positions not written). */
WIDE static void pool_frame(const float *restrict y, int64_t hc, int64_t wc, int64_t cout, int64_t coutp,
                            int64_t hp, int64_t wp, float *restrict ob, int32_t *restrict pb, float *restrict out,
                            uint8_t *restrict pos) {
    for (int64_t pi = 0; pi < hp; pi++) {
        const int64_t i0 = 2 * pi - 1 < 0 ? 0 : 2 * pi - 1, i1 = 2 * pi + 2 > hc ? hc : 2 * pi + 2;
        for (int64_t pj = 0; pj < wp; pj++) {
            const int64_t j0 = 2 * pj - 1 < 0 ? 0 : 2 * pj - 1, j1 = 2 * pj + 2 > wc ? wc : 2 * pj + 2;
            /* torch: max from -inf, the index of the first valid position, then row-major
             * "v > max or v is NaN" */
            const int32_t first = (int32_t)((i0 - (2 * pi - 1)) * 3 + (j0 - (2 * pj - 1)));
            float *restrict best = ob + (pi * wp + pj) * coutp;
            int32_t *restrict arg = pb + (pi * wp + pj) * coutp;
            for (int64_t c = 0; c < coutp; c++) { best[c] = -INFINITY; arg[c] = first; }
            for (int64_t i = i0; i < i1; i++) {
                for (int64_t j = j0; j < j1; j++) {
                    const float *restrict v = y + (i * wc + j) * coutp;
                    const int32_t a = (int32_t)((i - (2 * pi - 1)) * 3 + (j - (2 * pj - 1)));
                    for (int64_t c = 0; c < coutp; c++) {
                        const int take = v[c] > best[c] || v[c] != v[c];
                        best[c] = take ? v[c] : best[c];
                        arg[c] = take ? a : arg[c];
                    }
                }
            }
            for (int64_t c = 0; c < coutp; c++) {   /* relu (torch: v unless v <= 0; NaN kept and live) */
                const int live = !(best[c] <= 0.0f);
                arg[c] = live ? arg[c] : DEAD;
                best[c] = live ? best[c] : 0.0f;
            }
        }
    }
    /* cout of the coutp channels, HWC as torch's channels-last */
    if (cout == coutp) {
        memcpy(out, ob, sizeof(float) * (size_t)(hp * wp * cout));
    } else {
        for (int64_t o = 0; o < hp * wp; o++) memcpy(out + o * cout, ob + o * coutp, sizeof(float) * (size_t)cout);
    }
    for (int64_t o = 0; pos && o < hp * wp; o++) {
        const int32_t *restrict src = pb + o * coutp;
        uint8_t *restrict dst = pos + o * cout;
        for (int64_t c = 0; c < cout; c++) dst[c] = (uint8_t)src[c];
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define HAVE_AVX512 1   /* the AVX-512 conv, pool and weight gradient below, chosen at run time */
/* pool_frame for cout a multiple of 16 on AVX-512 (F, BW, VL, DQ): the window scan runs in
 * registers (the running maximum and position as one vector and one mask move per window
 * element; GCC's vectorised loop kept them in memory), with torch's rule as a mask: take v
 * where v > max (ordered) or v is NaN. Writes out and pos directly. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
static void pool_frame_512(const float *restrict y, int64_t hc, int64_t wc, int64_t cout, int64_t hp, int64_t wp,
                           float *restrict out, uint8_t *restrict pos) {
    for (int64_t pi = 0; pi < hp; pi++) {
        const int64_t i0 = 2 * pi - 1 < 0 ? 0 : 2 * pi - 1, i1 = 2 * pi + 2 > hc ? hc : 2 * pi + 2;
        for (int64_t pj = 0; pj < wp; pj++) {
            const int64_t j0 = 2 * pj - 1 < 0 ? 0 : 2 * pj - 1, j1 = 2 * pj + 2 > wc ? wc : 2 * pj + 2;
            const int first = (int)((i0 - (2 * pi - 1)) * 3 + (j0 - (2 * pj - 1)));
            for (int64_t c0 = 0; c0 < cout; c0 += 16) {
                __m512 best = _mm512_set1_ps(-INFINITY);
                __m512i arg = _mm512_set1_epi32(first);
                for (int64_t i = i0; i < i1; i++) {
                    for (int64_t j = j0; j < j1; j++) {
                        const __m512 v = _mm512_loadu_ps(y + (i * wc + j) * cout + c0);
                        const __mmask16 take = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) |
                                               _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
                        best = _mm512_mask_mov_ps(best, take, v);
                        arg = _mm512_mask_mov_epi32(
                            arg, take, _mm512_set1_epi32((int)((i - (2 * pi - 1)) * 3 + (j - (2 * pj - 1)))));
                    }
                }
                /* relu: torch keeps v unless v <= 0, so a NaN stays NaN and passes its gradient */
                const __mmask16 live = _mm512_cmp_ps_mask(best, _mm512_setzero_ps(), _CMP_NLE_UQ);
                const int64_t o = (pi * wp + pj) * cout + c0;
                _mm512_storeu_ps(out + o, _mm512_maskz_mov_ps(live, best));
                if (pos)
                    _mm_storeu_si128((__m128i *)(pos + o),
                                     _mm512_cvtepi32_epi8(_mm512_mask_mov_epi32(_mm512_set1_epi32(DEAD), live, arg)));
            }
        }
    }
}

/* conv_frame for cout a multiple of 16 on AVX-512: four positions at a time, each tap's 16
 * weights loaded once for the four, the input values broadcast from the padded frame. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
static void conv_frame_512(const float *restrict xp, int64_t w, int64_t cin, const float *restrict wt,
                           const float *restrict bias, int64_t cout, int64_t hc, int64_t wc, float *restrict y) {
    const int64_t row = (w + 2) * cin;
    for (int64_t c0 = 0; c0 < cout; c0 += 16) {
        const __m512 b = _mm512_loadu_ps(bias + c0);
        for (int64_t i = 0; i < hc; i++) {
            const float *restrict r = xp + 2 * i * row;
            int64_t j = 0;
            for (; j + 4 <= wc; j += 4) {
                __m512 a0 = b, a1 = b, a2 = b, a3 = b;
                for (int64_t ci = 0; ci < cin; ci++) {
                    for (int64_t ky = 0; ky < 3; ky++) {
                        const float *restrict q = r + ky * row + 2 * j * cin + ci;
                        for (int64_t kx = 0; kx < 3; kx++) {
                            const __m512 wv = _mm512_loadu_ps(wt + (ci * 9 + ky * 3 + kx) * cout + c0);
                            const float *restrict e = q + kx * cin;
                            a0 = _mm512_fmadd_ps(_mm512_set1_ps(e[0]), wv, a0);
                            a1 = _mm512_fmadd_ps(_mm512_set1_ps(e[2 * cin]), wv, a1);
                            a2 = _mm512_fmadd_ps(_mm512_set1_ps(e[4 * cin]), wv, a2);
                            a3 = _mm512_fmadd_ps(_mm512_set1_ps(e[6 * cin]), wv, a3);
                        }
                    }
                }
                float *restrict o = y + (i * wc + j) * cout + c0;
                _mm512_storeu_ps(o, a0);
                _mm512_storeu_ps(o + cout, a1);
                _mm512_storeu_ps(o + 2 * cout, a2);
                _mm512_storeu_ps(o + 3 * cout, a3);
            }
            for (; j < wc; j++) {
                __m512 a0 = b;
                for (int64_t ci = 0; ci < cin; ci++)
                    for (int64_t ky = 0; ky < 3; ky++)
                        for (int64_t kx = 0; kx < 3; kx++)
                            a0 = _mm512_fmadd_ps(_mm512_set1_ps(r[ky * row + (2 * j + kx) * cin + ci]),
                                                 _mm512_loadu_ps(wt + (ci * 9 + ky * 3 + kx) * cout + c0), a0);
                _mm512_storeu_ps(y + (i * wc + j) * cout + c0, a0);
            }
        }
    }
}

/* One frame's weight and bias gradients for one input channel and cout a multiple of 16 on
 * AVX-512, without the pool's input gradient: each output's gradient (masked to the channels
 * whose window position is a) meets the input patch at that position directly, in 9 + 1
 * accumulators per 16 channels. dw [9][cout], db [cout] are added to. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
static void weight_grad_frame_512(const float *restrict xp, int64_t w, const float *restrict go,
                                  const uint8_t *restrict ps, int64_t cout, int64_t hp, int64_t wp,
                                  float *restrict dw, float *restrict db) {
    const int64_t row = w + 2;
    for (int64_t c0 = 0; c0 < cout; c0 += 16) {
        __m512 acc[9], accb = _mm512_setzero_ps();
        for (int t = 0; t < 9; t++) acc[t] = _mm512_setzero_ps();
        for (int64_t pi = 0; pi < hp; pi++) {
            for (int64_t pj = 0; pj < wp; pj++) {
                const int64_t o = (pi * wp + pj) * cout + c0;
                const __m512i a = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(ps + o)));
                const __m512 g = _mm512_loadu_ps(go + o);
                const __mmask16 live = _mm512_cmpneq_epi32_mask(a, _mm512_set1_epi32(DEAD));
                if (!live) continue;
                accb = _mm512_add_ps(accb, _mm512_maskz_mov_ps(live, g));
                for (int k = 0; k < 9; k++) {
                    const __mmask16 m = _mm512_cmpeq_epi32_mask(a, _mm512_set1_epi32(k));
                    if (!m) continue;
                    const __m512 gm = _mm512_maskz_mov_ps(m, g);
                    /* conv position (2pi - 1 + k / 3, 2pj - 1 + k % 3); its patch in the padded
                     * frame starts at row 2 * (that) and col 2 * (that) */
                    const float *restrict e = xp + (2 * (2 * pi - 1 + k / 3)) * row + 2 * (2 * pj - 1 + k % 3);
                    for (int t = 0; t < 9; t++)
                        acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(e[(t / 3) * row + t % 3]), gm, acc[t]);
                }
            }
        }
        for (int t = 0; t < 9; t++)
            _mm512_storeu_ps(dw + t * cout + c0, _mm512_add_ps(_mm512_loadu_ps(dw + t * cout + c0), acc[t]));
        _mm512_storeu_ps(db + c0, _mm512_add_ps(_mm512_loadu_ps(db + c0), accb));
    }
}

static int avx512_ok(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}
#else
#define HAVE_AVX512 0
#endif

/* Whether this CPU runs the AVX-512 loops (stem.py takes the kernel only then: the portable
 * loops, which cout not a multiple of 16 or several input channels also use, were slower than
 * torch's own ops when built for AVX2). */
int stem_wide(void) {
#if HAVE_AVX512
    return avx512_ok();
#else
    return 0;
#endif
}

/* Forward of frames [n0, n1): x [N][H][W][C], weight [cout][cin][3][3], out [N][hp][wp][cout]
 * (channels-last, as torch's own stem returns it), pos [N][hp][wp][cout] (NULL: not written, for a
 * forward no backward follows). Returns 0; 1 when
 * some input value is NaN or infinite (everything still computed: the caller takes torch's ops,
 * whose dense backward turns 0 x inf into NaN gradients); -1 on sizes this kernel does not
 * take, -2 when out of memory. */
int stem_forward(const float *x, int64_t n0, int64_t n1, int64_t h, int64_t w, int64_t cin, const float *weight,
                 const float *bias, int64_t cout, float *out, uint8_t *pos) {
    if (cin < 1 || 9 * cin > MAX_TAPS || cout < 1 || cout > MAX_COUT || h < 1 || w < 1 || n0 < 0 || n1 < n0)
        return -1;
    const int64_t hc = half(h), wc = half(w), hp = half(hc), wp = half(wc), taps = 9 * cin;
    const int64_t coutp = (cout + LANES - 1) / LANES * LANES;
    float *wt = calloc((size_t)(taps * coutp), sizeof(float));
    float *y = malloc(sizeof(float) * (size_t)(hc * wc * coutp));
    float *xp = malloc(sizeof(float) * (size_t)((h + 2) * (w + 2) * cin));
    float *ob = malloc(sizeof(float) * (size_t)(hp * wp * coutp));
    int32_t *pb = malloc(sizeof(int32_t) * (size_t)(hp * wp * coutp));
    float bp[MAX_COUT] = {0};
    if (!wt || !y || !xp || !ob || !pb) { free(wt); free(y); free(xp); free(ob); free(pb); return -2; }
    for (int64_t co = 0; co < cout; co++) {
        bp[co] = bias[co];
        for (int64_t t = 0; t < taps; t++) wt[t * coutp + co] = weight[co * taps + t];
    }
#if HAVE_AVX512
    const int fast = cout == coutp && avx512_ok();
#else
    const int fast = 0;
#endif
    int nonfinite = 0;
    for (int64_t n = n0; n < n1; n++) {
        nonfinite |= pad_frame(x + n * h * w * cin, h, w, cin, xp);
#if HAVE_AVX512
        if (fast) conv_frame_512(xp, w, cin, wt, bp, cout, hc, wc, y);
        else
#endif
        conv_frame(xp, w, cin, wt, bp, coutp, hc, wc, y);
        uint8_t *pn = pos ? pos + n * cout * hp * wp : NULL;
        if (fast) pool_frame_512(y, hc, wc, cout, hp, wp, out + n * cout * hp * wp, pn);
        else pool_frame(y, hc, wc, cout, coutp, hp, wp, ob, pb, out + n * cout * hp * wp, pn);
    }
    free(wt);
    free(y);
    free(xp);
    free(ob);
    free(pb);
    return nonfinite;
}

/* dW[t][co] += sum over conv positions of g[i][j][co] * patch(i, j)[t] for one frame, the
 * patches read from the padded frame xp as conv_frame reads them. */
WIDE static void weight_grad_frame(const float *restrict xp, int64_t w, int64_t cin, const float *restrict g,
                                   int64_t hc, int64_t wc, int64_t cout, const uint8_t *restrict live,
                                   float *restrict dw, float *restrict db) {
    float patch[MAX_TAPS];
    const int64_t taps = 9 * cin, row = (w + 2) * cin;
    for (int64_t i = 0; i < hc; i++) {
        for (int64_t j = 0; j < wc; j++) {
            if (!live[i * wc + j]) continue;
            const float *restrict p0 = xp + 2 * i * row + 2 * j * cin;
            for (int64_t ci = 0; ci < cin; ci++)
                for (int64_t ky = 0; ky < 3; ky++)
                    for (int64_t kx = 0; kx < 3; kx++) patch[ci * 9 + ky * 3 + kx] = p0[ky * row + kx * cin + ci];
            const float *restrict gv = g + (i * wc + j) * cout;
            for (int64_t co = 0; co < cout; co++) db[co] += gv[co];
            for (int64_t t = 0; t < taps; t++) {
                const float v = patch[t];
                float *restrict d = dw + t * cout;
                for (int64_t co = 0; co < cout; co++) d[co] += v * gv[co];
            }
        }
    }
}

/* Weight and bias gradients of frames [n0, n1) from gout [N][hp][wp][cout] (the gradient of the
 * stem's output, channels-last) and pos: dweight [cout][cin][3][3] and dbias [cout] as float64 sums (a caller
 * splitting the frames over threads adds the parts). Returns 0, or -1 / -2 as stem_forward. */
int stem_backward(const float *x, int64_t n0, int64_t n1, int64_t h, int64_t w, int64_t cin, const float *gout,
                  const uint8_t *pos, int64_t cout, double *dweight, double *dbias) {
    if (cin < 1 || 9 * cin > MAX_TAPS || cout < 1 || cout > MAX_COUT || h < 1 || w < 1 || n0 < 0 || n1 < n0)
        return -1;
    const int64_t hc = half(h), wc = half(w), hp = half(hc), wp = half(wc), taps = 9 * cin, plane = hp * wp;
    float *g = malloc(sizeof(float) * (size_t)(hc * wc * cout));   /* the pool's input gradient, HWC */
    uint8_t *live = malloc((size_t)(hc * wc));                      /* conv positions with any gradient */
    float *dw = malloc(sizeof(float) * (size_t)(taps * cout));      /* one frame's part, then added */
    float *xp = malloc(sizeof(float) * (size_t)((h + 2) * (w + 2) * cin));
    float db[MAX_COUT];
    if (!g || !live || !dw || !xp) { free(g); free(live); free(dw); free(xp); return -2; }
    for (int64_t i = 0; i < taps * cout; i++) dweight[i] = 0.0;
    for (int64_t co = 0; co < cout; co++) dbias[co] = 0.0;
#if HAVE_AVX512
    const int fast = cin == 1 && cout % 16 == 0 && avx512_ok();
#else
    const int fast = 0;
#endif
    for (int64_t n = n0; n < n1; n++) {
        const float *go = gout + n * cout * plane;
        const uint8_t *ps = pos + n * cout * plane;
        pad_frame(x + n * h * w * cin, h, w, cin, xp);
        memset(dw, 0, sizeof(float) * (size_t)(taps * cout));
        memset(db, 0, sizeof(float) * (size_t)cout);
#if HAVE_AVX512
        if (fast) weight_grad_frame_512(xp, w, go, ps, cout, hp, wp, dw, db);
#endif
        if (!fast) {   /* the pool's input gradient g, then the weight gradient from it */
            memset(g, 0, sizeof(float) * (size_t)(hc * wc * cout));
            memset(live, 0, (size_t)(hc * wc));
            for (int64_t pi = 0; pi < hp; pi++) {
                for (int64_t pj = 0; pj < wp; pj++) {
                    const int64_t o = (pi * wp + pj) * cout;
                    for (int64_t co = 0; co < cout; co++) {
                        const uint8_t a = ps[o + co];
                        if (a == DEAD) continue;
                        const int64_t i = 2 * pi - 1 + a / 3, j = 2 * pj - 1 + a % 3;
                        g[(i * wc + j) * cout + co] += go[o + co];
                        live[i * wc + j] = 1;
                    }
                }
            }
            weight_grad_frame(xp, w, cin, g, hc, wc, cout, live, dw, db);
        }
        for (int64_t t = 0; t < taps; t++)
            for (int64_t co = 0; co < cout; co++) dweight[co * taps + t] += dw[t * cout + co];
        for (int64_t co = 0; co < cout; co++) dbias[co] += db[co];
    }
    free(g);
    free(live);
    free(dw);
    free(xp);
    return 0;
}

static struct PyModuleDef stem_module = {
    PyModuleDef_HEAD_INIT, .m_name = "_stem", .m_doc = "ctypes-loaded fused policy stem (see the C source)",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__stem(void) { return PyModule_Create(&stem_module); }

/* The residual blocks' bias add under bf16 autocast (bps_train/cast_add.py states the contract):
 * out[i] = x[i] + b in float32, rounded to bfloat16 to nearest even (NaN: 0x7FC0), for the
 * elements [i0, i1) of x float32 (x_bf16 0) or bfloat16 (x_bf16 1): the bits of torch's promoted
 * sum cast to bfloat16, written in one pass. Returns 0; -1 on a bad range. */
static inline uint16_t round_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

WIDE int add_to_bf16(const void *x, int64_t i0, int64_t i1, int64_t x_bf16, float b, uint16_t *out) {
    if (i0 < 0 || i1 < i0) return -1;
    if (x_bf16) {
        const uint16_t *restrict xs = (const uint16_t *)x;
        for (int64_t i = i0; i < i1; i++) {
            uint32_t u = (uint32_t)xs[i] << 16;
            float f;
            memcpy(&f, &u, sizeof f);
            out[i] = round_bf16(f + b);
        }
    } else {
        const float *restrict xs = (const float *)x;
        for (int64_t i = i0; i < i1; i++) out[i] = round_bf16(xs[i] + b);
    }
    return 0;
}
