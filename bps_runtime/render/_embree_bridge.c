/*
 * A small bridge over Embree 4 that the Embree renderer calls through ctypes.
 *
 * Why it exists: embreex copies the geometry in a Python-level loop and commits the BVH with the
 * GIL held (~0.5 s per 600K-triangle scene), which stalls every Python thread, the step loop
 * included, whenever the scene cache builds a scene in the background. Through ctypes every call
 * here runs with the GIL released; the geometry buffers are shared with numpy (no copy), and
 * camera rays are generated and traced in 16-wide packets in C (no [N*H*W, 3] ray arrays).
 *
 * The library is the libembree4 that the embreex wheel ships (found and passed in by Python:
 * bps_load); the wheel has no headers, so the few types and enum values used are declared below
 * (Embree 4 API, include/embree4/rtcore_{common,buffer,geometry,ray,scene}.h).
 *
 * It is built as a (method-less) Python extension so that setuptools compiles it with pip
 * install; Python finds its file with importlib and loads it with ctypes.CDLL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef void *RTCDevice;
typedef void *RTCScene;
typedef void *RTCGeometry;

enum {
    RTC_BUFFER_TYPE_INDEX = 0,
    RTC_BUFFER_TYPE_VERTEX = 1,
    RTC_GEOMETRY_TYPE_TRIANGLE = 0,
    RTC_FORMAT_UINT3 = 0x5003,
    RTC_FORMAT_FLOAT3 = 0x9003,
};
#define RTC_INVALID_ID 0xFFFFFFFFu

/* RTCRayHit16 in SOA layout: RTCRay16 (12 x 16 lanes) then RTCHit16. The hit part ends with
 * instID (and, in builds with instance arrays, instPrimID) per instance level; the padding covers
 * both for up to 4 levels so the struct is never written past its end. */
typedef struct {
    float org_x[16], org_y[16], org_z[16], tnear[16];
    float dir_x[16], dir_y[16], dir_z[16], time[16];
    float tfar[16];
    uint32_t mask[16], id[16], flags[16];
    float ng_x[16], ng_y[16], ng_z[16], u[16], v[16];
    uint32_t prim_id[16], geom_id[16];
    uint32_t inst_tail[8][16];
} __attribute__((aligned(64))) RayHit16;

static struct {
    void *lib;
    RTCDevice (*newDevice)(const char *);
    void (*releaseDevice)(RTCDevice);
    int (*getDeviceError)(RTCDevice);
    const char *(*getDeviceLastErrorMessage)(RTCDevice);
    RTCScene (*newScene)(RTCDevice);
    void (*releaseScene)(RTCScene);
    void (*setSceneBuildQuality)(RTCScene, int);
    void (*setSceneFlags)(RTCScene, int);
    void (*commitScene)(RTCScene);
    RTCGeometry (*newGeometry)(RTCDevice, int);
    void (*setSharedGeometryBuffer)(RTCGeometry, int, unsigned, int, const void *, size_t, size_t, size_t);
    void (*commitGeometry)(RTCGeometry);
    unsigned (*attachGeometry)(RTCScene, RTCGeometry);
    void (*releaseGeometry)(RTCGeometry);
    void (*intersect16)(const int *, RTCScene, RayHit16 *, void *);
} E;

/* A missing symbol: not Embree 4. Close the library again and forget what was found, so a later
 * call can try another path with nothing leaked or half set. */
#define LOAD(field, name)                               \
    do {                                                \
        *(void **)(&E.field) = dlsym(lib, name);        \
        if (!E.field) {                                 \
            memset(&E, 0, sizeof E);                    \
            dlclose(lib);                               \
            return 2;                                   \
        }                                               \
    } while (0)

/* 0: ready; 1: dlopen failed; 2: a symbol is missing (not Embree 4). */
int bps_load(const char *path) {
    if (E.lib) return 0;
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) return 1;
    LOAD(newDevice, "rtcNewDevice");
    LOAD(releaseDevice, "rtcReleaseDevice");
    LOAD(getDeviceError, "rtcGetDeviceError");
    LOAD(getDeviceLastErrorMessage, "rtcGetDeviceLastErrorMessage");
    LOAD(newScene, "rtcNewScene");
    LOAD(releaseScene, "rtcReleaseScene");
    LOAD(setSceneBuildQuality, "rtcSetSceneBuildQuality");
    LOAD(setSceneFlags, "rtcSetSceneFlags");
    LOAD(commitScene, "rtcCommitScene");
    LOAD(newGeometry, "rtcNewGeometry");
    LOAD(setSharedGeometryBuffer, "rtcSetSharedGeometryBuffer");
    LOAD(commitGeometry, "rtcCommitGeometry");
    LOAD(attachGeometry, "rtcAttachGeometry");
    LOAD(releaseGeometry, "rtcReleaseGeometry");
    LOAD(intersect16, "rtcIntersect16");
    E.lib = lib;
    return 0;
}

const char *bps_load_error(void) { return dlerror(); }

void *bps_device_new(const char *config) { return E.newDevice(config); }
void bps_device_release(void *dev) { E.releaseDevice(dev); }

/* The device's pending error code (clears it) and its last message. */
int bps_device_error(void *dev, const char **message) {
    int code = E.getDeviceError(dev);
    *message = code ? E.getDeviceLastErrorMessage(dev) : "";
    return code;
}

/* Commit `scene`; NULL (the scene released) when the device reports an error. */
static void *commit_checked(void *dev, RTCScene scene) {
    E.commitScene(scene);
    const char *msg;
    if (bps_device_error(dev, &msg)) {
        E.releaseScene(scene);
        return NULL;
    }
    return scene;
}

/* One triangle mesh as a committed scene. `vertices` (nv x float3, stride 12, padded by one
 * float so Embree's 16-byte loads stay inside) and `triangles` (nt x uint3) are shared, not
 * copied: the caller keeps them alive while the scene lives. `flags`: RTCSceneFlags (COMPACT = 2
 * picks Embree's index-referencing leaves). NULL on error (see bps_device_error). */
void *bps_scene_build(void *dev, const float *vertices, size_t nv, const uint32_t *triangles, size_t nt,
                      int quality, int flags) {
    RTCScene scene = E.newScene(dev);
    if (!scene) return NULL;
    E.setSceneFlags(scene, flags);
    E.setSceneBuildQuality(scene, quality);
    RTCGeometry geom = E.newGeometry(dev, RTC_GEOMETRY_TYPE_TRIANGLE);
    if (!geom) {
        E.releaseScene(scene);
        return NULL;
    }
    E.setSharedGeometryBuffer(geom, RTC_BUFFER_TYPE_VERTEX, 0, RTC_FORMAT_FLOAT3, vertices, 0, 12, nv);
    E.setSharedGeometryBuffer(geom, RTC_BUFFER_TYPE_INDEX, 0, RTC_FORMAT_UINT3, triangles, 0, 12, nt);
    E.commitGeometry(geom);
    E.attachGeometry(scene, geom);
    E.releaseGeometry(geom);
    return commit_checked(dev, scene);
}

void bps_scene_release(void *scene) { E.releaseScene(scene); }

/* ---------------------------------------------------------------- Redwood depth noise (noise/)
 * habitat-sim's Redwood depth model over envs [lo, hi) of a depth batch: the same arithmetic and
 * the same random draws as the Warp kernel (bps_runtime/noise/sensors.py `redwood`, rng.py), so
 * the two agree value for value; docs/NOISE.md says what the model does. Here because the frames
 * it reads are the Embree path's (rendered on the CPU): the Warp kernel's per-row draw chain cost
 * as much as the rays. Each pixel's draws are independent hashes (nothing carried along a row),
 * and the table offsets and the hashes of draw indices are hoisted out of the pixel loop. */
#define RW_GOLDEN 0x9E3779B9u
#define RW_ZIG_LAYERS 128
#define RW_ZIG_R 3.442619855899f

static inline uint32_t rw_pcg(uint32_t state) {   /* Warp's rand_pcg (native/rand.h) */
    uint32_t b = state * 747796405u + 2891336453u;
    uint32_t c = ((b >> ((b >> 28u) + 4u)) ^ b) * 277803737u;
    return (c >> 22u) ^ c;
}

static inline uint32_t rw_mix32(uint32_t a, uint32_t b) {   /* rng.mix32 */
    uint32_t h = a ^ (b * RW_GOLDEN);
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    return h ^ (h >> 16);
}

static inline float rw_randf(uint32_t *s) {
    *s = rw_pcg(*s);
    return (float)(*s >> 8) * (1.0f / 16777216.0f);
}

/* rng.normal_from: the ziggurat's first try from draw `b`, any further draws from state
 * rw_pcg(`s0`) (~1.5 % of normals: kept out of line, the state hashed only then). */
static __attribute__((noinline)) float rw_normal_slow(uint32_t b, uint32_t s0, const float *zig) {
    uint32_t s = rw_pcg(s0);
    for (;;) {
        int i = (int)(b & 127u);
        float u = (float)(b >> 8) * (1.0f / 8388608.0f) - 1.0f;
        if (fabsf(u) < zig[RW_ZIG_LAYERS + 1 + i]) return u * zig[i];
        if (i == 0) {
            float x = 0.0f, y = 0.0f, xx = 1.0f;
            while (-2.0f * y < xx) {
                x = logf(rw_randf(&s) + 5.96e-8f) / RW_ZIG_R;
                y = logf(rw_randf(&s) + 5.96e-8f);
                xx = x * x;
            }
            return u < 0.0f ? x - RW_ZIG_R : RW_ZIG_R - x;
        }
        float x = u * zig[i];
        float f0 = expf(-0.5f * (zig[i] * zig[i] - x * x));
        float f1 = expf(-0.5f * (zig[i + 1] * zig[i + 1] - x * x));
        if (f1 + rw_randf(&s) * (f0 - f1) < 1.0f) return x;
        s = rw_pcg(s);
        b = s;
    }
}

static inline float rw_normal(uint32_t b, uint32_t s0, const float *zig) {
    int i = (int)(b & 127u);
    float u = (float)(b >> 8) * (1.0f / 8388608.0f) - 1.0f;
    if (fabsf(u) < zig[RW_ZIG_LAYERS + 1 + i]) return u * zig[i];
    return rw_normal_slow(b, s0, zig);
}

/* roundf (half away from zero) without a libm call: exact for every float */
static inline float rw_round(float x) {
    if (!(fabsf(x) < 8388608.0f)) return x;   /* already an integer (or NaN) */
    float t = (float)(int32_t)x, r = x - t;   /* both exact; no branch on the (random) fraction */
    return t + (float)(r >= 0.5f) - (float)(r <= -0.5f);
}

/* sensors.shuffle_offset: the first k with u < cdf[k], less the centre (n = 2K + 1 entries). */
static inline int rw_offset(uint32_t u, const uint32_t *cdf, int64_t n) {
    int64_t k = (n - 1) / 2;
    /* -1, 0 or +1 (all but ~1e-9 of draws at multiplier 1) without a search */
    if (k >= 2 && u - cdf[k - 2] < cdf[k + 1] - cdf[k - 2]) return (u >= cdf[k]) - (u < cdf[k - 1]);
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (u < cdf[mid]) hi = mid; else lo = mid + 1;
    }
    return (int)(lo - k);
}

typedef struct {
    float mult, lo, hi, inv;   /* multiplier; the sensor's depth range [lo, hi] and 1 / (hi - lo) */
    int64_t finish;            /* the noisy depth out: 0 metres, 1 clipped to [lo, hi], 2 clipped, 0-1 */
} RedwoodParams;

/* One frame's hoisted tables: the hashes of each column's four draw indices (rng.draw: draw n of a
 * row is rw_pcg(row state + rw_pcg(n)), n = 4i + k) and the table cell offsets per row / column. */
typedef struct {
    uint32_t *draw[4];
    int32_t *cell_x, *cell_y;
    const float *table, *zig;
    float zig_pairs[2 * RW_ZIG_LAYERS];   /* (edge x[i], ratio) of layer i, side by side */
    const uint32_t *cdf;
    int64_t ncdf, h, w;
    const RedwoodParams *p;
} RedwoodFrame;

/* The widest path taken: 0 scalar, 2 AVX2, else the CPU's best (tests pin each, bps_redwood_isa). */
static int rw_isa = -1;

int bps_redwood_isa(int isa) {
    int before = rw_isa;
    rw_isa = isa;
    return before;
}

static const float RW_K35 = 35.130f, RW_K8 = 8.0f, RW_KDZ = 0.027778f;

/* Pixel (j, i) of one env (src: its frame; s1, s2: row and column strides): sensors.redwood. */
static inline float rw_pixel(const RedwoodFrame *F, const float *src, int64_t s1, int64_t s2, uint32_t rs,
                             int64_t j, int64_t i) {
    const RedwoodParams *p = F->p;
    int64_t h = F->h, w = F->w;
    int64_t y = j + rw_offset(rw_pcg(rs + F->draw[0][i]), F->cdf, F->ncdf);
    int64_t x = i + rw_offset(rw_pcg(rs + F->draw[1][i]), F->cdf, F->ncdf);
    y = y < 0 ? 0 : (y > h - 1 ? h - 1 : y);
    x = x < 0 ? 0 : (x > w - 1 ? w - 1 : x);
    float d = src[(y & ~(int64_t)1) * s1 + (x & ~(int64_t)1) * s2];   /* raw metres, unclipped */
    float v = 0.0f;
    if (d < 10.0f) {
        /* x * 0.5: x / 2 exactly; floored at -1 before the cast (a negative or huge depth: no
         * out-of-range conversion) and both slices clamped to the table's 5 depths */
        float h = (d + 1.0f) * 0.5f;
        int i2 = (int)(h < -1.0f ? -1.0f : h), i1 = i2 - 1;
        float a = (d - ((float)i1 * 2.0f + 1.0f)) * 0.5f;
        const float *t = F->table + F->cell_y[y] + F->cell_x[x];
        float f = (1.0f - a) * t[i1 < 0 ? 0 : (i1 > 4 ? 4 : i1)] + a * t[i2 < 0 ? 0 : (i2 > 4 ? 4 : i2)];
        if (f >= 1e-5f && d != 0.0f) {
            float dz = rw_normal(rw_pcg(rs + F->draw[2][i]), rs + F->draw[3][i], F->zig);
            float denom = rw_round((RW_K35 * f / d + dz * RW_KDZ * p->mult) * RW_K8);
            if (denom > 1e-5f) v = RW_K35 * RW_K8 / denom;
        }
    }
    if (p->finish) v = v < p->lo ? p->lo : (v > p->hi ? p->hi : v);   /* habitat-lab's clip after the noise */
    if (p->finish == 2) v = (v - p->lo) * p->inv;
    return v;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define RW_AVX2 __attribute__((target("avx2")))

RW_AVX2 static inline __m256i rw_pcg8(__m256i state) {
    __m256i b = _mm256_add_epi32(_mm256_mullo_epi32(state, _mm256_set1_epi32(747796405)),
                                 _mm256_set1_epi32((int)2891336453u));
    __m256i sh = _mm256_add_epi32(_mm256_srli_epi32(b, 28), _mm256_set1_epi32(4));
    __m256i c = _mm256_mullo_epi32(_mm256_xor_si256(_mm256_srlv_epi32(b, sh), b), _mm256_set1_epi32(277803737));
    return _mm256_xor_si256(_mm256_srli_epi32(c, 22), c);
}

RW_AVX2 static inline __m256i rw_ge8(__m256i a, __m256i b) {   /* unsigned a >= b: all ones */
    return _mm256_cmpeq_epi32(_mm256_max_epu32(a, b), a);
}

/* Pixels i0..i0+7 of row j, the same values as rw_pixel: 0 when done, 1 when a lane's shuffle
 * offset is beyond +-1 (the caller then takes rw_pixel for the 8). Needs ncdf >= 5, a unit
 * column stride out, and strides that fit 32-bit gather offsets. */
RW_AVX2 static int rw_block8(const RedwoodFrame *F, const float *src, int64_t s1, int64_t s2, uint32_t rs,
                             int64_t j, int64_t i0, float *dst) {
    const RedwoodParams *p = F->p;
    int64_t k = (F->ncdf - 1) / 2;
    const uint32_t *cdf = F->cdf;
    __m256i rsv = _mm256_set1_epi32((int)rs);
    __m256i uy = rw_pcg8(_mm256_add_epi32(rsv, _mm256_loadu_si256((const __m256i *)(F->draw[0] + i0))));
    __m256i ux = rw_pcg8(_mm256_add_epi32(rsv, _mm256_loadu_si256((const __m256i *)(F->draw[1] + i0))));
    __m256i c_lo = _mm256_set1_epi32((int)cdf[k - 2]), span = _mm256_set1_epi32((int)(cdf[k + 1] - cdf[k - 2]));
    __m256i far = _mm256_or_si256(rw_ge8(_mm256_sub_epi32(uy, c_lo), span), rw_ge8(_mm256_sub_epi32(ux, c_lo), span));
    if (!_mm256_testz_si256(far, far)) return 1;
    __m256i ck = _mm256_set1_epi32((int)cdf[k]), ck1 = _mm256_set1_epi32((int)cdf[k - 1]);
    __m256i ones = _mm256_set1_epi32(-1), zero = _mm256_setzero_si256();
    /* offset = (u >= cdf[k]) - (u < cdf[k - 1]); masks are -1 for true */
    __m256i oy = _mm256_sub_epi32(_mm256_xor_si256(rw_ge8(uy, ck1), ones), rw_ge8(uy, ck));
    __m256i ox = _mm256_sub_epi32(_mm256_xor_si256(rw_ge8(ux, ck1), ones), rw_ge8(ux, ck));
    __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i y = _mm256_add_epi32(_mm256_set1_epi32((int)j), oy);
    __m256i x = _mm256_add_epi32(_mm256_add_epi32(_mm256_set1_epi32((int)i0), lane), ox);
    y = _mm256_min_epi32(_mm256_max_epi32(y, zero), _mm256_set1_epi32((int)(F->h - 1)));
    x = _mm256_min_epi32(_mm256_max_epi32(x, zero), _mm256_set1_epi32((int)(F->w - 1)));
    __m256i even = _mm256_set1_epi32(~1);
    __m256 d;
    if (s2 == 1) {
        /* rows y & ~1 are row j & ~1 or one other; columns x & ~1 are i0 - 2, i0 .. i0 + 6 or
         * i0 + 8: a permute of the row's 8 floats at i0, two broadcasts at the ends (no gather) */
        int64_t r0 = j & ~(int64_t)1, r1 = (j & 1) ? (j + 1 < F->h ? j + 1 : r0) : (j >= 2 ? j - 2 : r0);
        __m256i c = _mm256_sub_epi32(_mm256_and_si256(x, even), _mm256_set1_epi32((int)i0));
        __m256i lo_end = _mm256_cmpeq_epi32(c, _mm256_set1_epi32(-2)), hi_end = _mm256_cmpeq_epi32(c, _mm256_set1_epi32(8));
        __m256i perm = _mm256_and_si256(c, _mm256_set1_epi32(7));
        __m256 row_d[2];
        for (int k = 0; k < 2; k++) {
            const float *row = src + (k ? r1 : r0) * s1;
            __m256 v = _mm256_permutevar8x32_ps(_mm256_loadu_ps(row + i0), perm);
            if (i0 >= 2) v = _mm256_blendv_ps(v, _mm256_set1_ps(row[i0 - 2]), _mm256_castsi256_ps(lo_end));
            if (i0 + 8 < F->w) v = _mm256_blendv_ps(v, _mm256_set1_ps(row[i0 + 8]), _mm256_castsi256_ps(hi_end));
            row_d[k] = v;
        }
        __m256i other = _mm256_xor_si256(_mm256_cmpeq_epi32(_mm256_and_si256(y, even), _mm256_set1_epi32((int)r0)), ones);
        d = _mm256_blendv_ps(row_d[0], row_d[1], _mm256_castsi256_ps(other));
    } else {
        __m256i at = _mm256_add_epi32(_mm256_mullo_epi32(_mm256_and_si256(y, even), _mm256_set1_epi32((int)s1)),
                                      _mm256_mullo_epi32(_mm256_and_si256(x, even), _mm256_set1_epi32((int)s2)));
        d = _mm256_i32gather_ps(src, at, 4);
    }
    /* x / 2 as x * 0.5: the same float, no division */
    __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f), half = _mm256_set1_ps(0.5f);
    __m256i i2 = _mm256_cvttps_epi32(_mm256_max_ps(_mm256_mul_ps(_mm256_add_ps(d, one), half), _mm256_set1_ps(-1.0f)));
    __m256i i1 = _mm256_sub_epi32(i2, _mm256_set1_epi32(1));
    __m256 a = _mm256_mul_ps(_mm256_sub_ps(d, _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(i1), two), one)), half);
    __m256i four = _mm256_set1_epi32(4);
    /* the table cell of row y = j + oy and column x = i + ox (clamped), oy, ox in -1..1: selects
     * among rows j - 1, j, j + 1 and three windows of the padded column offsets, no gather */
    const int32_t *cy = F->cell_y + j, *cx = F->cell_x + i0;   /* padded: [-1] and [n] clamp */
    __m256i cyv = _mm256_blendv_epi8(_mm256_set1_epi32(cy[0]), _mm256_set1_epi32(cy[-1]), oy);   /* oy = -1: sign set */
    cyv = _mm256_blendv_epi8(cyv, _mm256_set1_epi32(cy[1]), _mm256_cmpgt_epi32(oy, zero));
    __m256i cxv = _mm256_blendv_epi8(_mm256_loadu_si256((const __m256i *)cx), _mm256_loadu_si256((const __m256i *)(cx - 1)), ox);
    cxv = _mm256_blendv_epi8(cxv, _mm256_loadu_si256((const __m256i *)(cx + 1)), _mm256_cmpgt_epi32(ox, zero));
    __m256i cell = _mm256_add_epi32(cyv, cxv);
    __m256 t1 = _mm256_i32gather_ps(F->table, _mm256_add_epi32(cell, _mm256_min_epi32(_mm256_max_epi32(i1, zero), four)), 4);
    __m256 t2 = _mm256_i32gather_ps(F->table, _mm256_add_epi32(cell, _mm256_min_epi32(_mm256_max_epi32(i2, zero), four)), 4);
    __m256 f = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(one, a), t1), _mm256_mul_ps(a, t2));
    __m256 ok = _mm256_and_ps(_mm256_and_ps(_mm256_cmp_ps(d, _mm256_set1_ps(10.0f), _CMP_LT_OQ),
                                            _mm256_cmp_ps(f, _mm256_set1_ps(1e-5f), _CMP_GE_OQ)),
                              _mm256_cmp_ps(d, _mm256_setzero_ps(), _CMP_NEQ_UQ));
    /* the normal: the ziggurat's fast path in the lanes, its other paths one lane at a time */
    __m256i b = rw_pcg8(_mm256_add_epi32(rsv, _mm256_loadu_si256((const __m256i *)(F->draw[2] + i0))));
    __m256i layer = _mm256_and_si256(b, _mm256_set1_epi32(127));
    __m256 u = _mm256_sub_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b, 8)), _mm256_set1_ps(1.0f / 8388608.0f)), one);
    __m256 ratio = _mm256_i32gather_ps(F->zig + RW_ZIG_LAYERS + 1, layer, 4);
    __m256 absu = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), u);
    __m256 accept = _mm256_cmp_ps(absu, ratio, _CMP_LT_OQ);
    __m256 dz = _mm256_mul_ps(u, _mm256_i32gather_ps(F->zig, layer, 4));
    int slow = _mm256_movemask_ps(_mm256_andnot_ps(accept, ok));
    if (slow) {
        float z[8];
        uint32_t bb[8];
        _mm256_storeu_ps(z, dz);
        _mm256_storeu_si256((__m256i *)bb, b);
        for (int l = 0; l < 8; l++)
            if (slow & (1 << l)) z[l] = rw_normal_slow(bb[l], rs + F->draw[3][i0 + l], F->zig);
        dz = _mm256_loadu_ps(z);
    }
    __m256 q = _mm256_mul_ps(_mm256_add_ps(_mm256_div_ps(_mm256_mul_ps(_mm256_set1_ps(RW_K35), f), d),
                                           _mm256_mul_ps(_mm256_mul_ps(dz, _mm256_set1_ps(RW_KDZ)), _mm256_set1_ps(p->mult))),
                             _mm256_set1_ps(RW_K8));
    /* rw_round */
    __m256 tq = _mm256_cvtepi32_ps(_mm256_cvttps_epi32(q)), r = _mm256_sub_ps(q, tq);
    __m256 rounded = _mm256_sub_ps(_mm256_add_ps(tq, _mm256_and_ps(_mm256_cmp_ps(r, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one)),
                                   _mm256_and_ps(_mm256_cmp_ps(r, _mm256_set1_ps(-0.5f), _CMP_LE_OQ), one));
    __m256 small = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), q), _mm256_set1_ps(8388608.0f), _CMP_LT_OQ);
    __m256 denom = _mm256_blendv_ps(q, rounded, small);
    __m256 v = _mm256_div_ps(_mm256_set1_ps(RW_K35 * RW_K8), denom);
    v = _mm256_and_ps(v, _mm256_and_ps(ok, _mm256_cmp_ps(denom, _mm256_set1_ps(1e-5f), _CMP_GT_OQ)));
    if (p->finish) v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(p->lo)), _mm256_set1_ps(p->hi));
    if (p->finish == 2) v = _mm256_mul_ps(_mm256_sub_ps(v, _mm256_set1_ps(p->lo)), _mm256_set1_ps(p->inv));
    _mm256_storeu_ps(dst + i0, v);
    return 0;
}

#define RW_AVX512 __attribute__((target("avx512f")))

RW_AVX512 static inline __m512i rw_pcg16(__m512i state) {
    __m512i b = _mm512_add_epi32(_mm512_mullo_epi32(state, _mm512_set1_epi32(747796405)),
                                 _mm512_set1_epi32((int)2891336453u));
    __m512i sh = _mm512_add_epi32(_mm512_srli_epi32(b, 28), _mm512_set1_epi32(4));
    __m512i c = _mm512_mullo_epi32(_mm512_xor_si512(_mm512_srlv_epi32(b, sh), b), _mm512_set1_epi32(277803737));
    return _mm512_xor_si512(_mm512_srli_epi32(c, 22), c);
}

/* rw_block16 in three stages, so that a row's blocks can go stage by stage side by side (each
 * block is one long chain of dependent steps: gathers, two divisions; interleaving independent
 * blocks keeps the vector units busy). Stage 1: the shuffle's draws and the depth read -> 1 when
 * a lane's offset is beyond +-1 (the caller then takes rw_block8 / rw_pixel for the block). */
typedef struct {
    __m512 d, f, dz;
    __m512i oy, ox, b;
    __mmask16 ok, slow;
} RwLanes16;

RW_AVX512 static inline __attribute__((always_inline)) int rw_stage1(const RedwoodFrame *F, const float *src,
                                                                     int64_t s1, int64_t s2, uint32_t rs, int64_t j,
                                                                     int64_t i0, RwLanes16 *L) {
    int64_t k = (F->ncdf - 1) / 2;
    const uint32_t *cdf = F->cdf;
    __m512i rsv = _mm512_set1_epi32((int)rs);
    __m512i uy = rw_pcg16(_mm512_add_epi32(rsv, _mm512_loadu_si512(F->draw[0] + i0)));
    __m512i ux = rw_pcg16(_mm512_add_epi32(rsv, _mm512_loadu_si512(F->draw[1] + i0)));
    __m512i c_lo = _mm512_set1_epi32((int)cdf[k - 2]), span = _mm512_set1_epi32((int)(cdf[k + 1] - cdf[k - 2]));
    if (_mm512_cmpge_epu32_mask(_mm512_sub_epi32(uy, c_lo), span) | _mm512_cmpge_epu32_mask(_mm512_sub_epi32(ux, c_lo), span))
        return 1;
    __m512i ck = _mm512_set1_epi32((int)cdf[k]), ck1 = _mm512_set1_epi32((int)cdf[k - 1]);
    __m512i one_i = _mm512_set1_epi32(1), zero = _mm512_setzero_si512();
    __m512i oy = _mm512_sub_epi32(_mm512_maskz_mov_epi32(_mm512_cmpge_epu32_mask(uy, ck), one_i),
                                  _mm512_maskz_mov_epi32(_mm512_cmplt_epu32_mask(uy, ck1), one_i));
    __m512i ox = _mm512_sub_epi32(_mm512_maskz_mov_epi32(_mm512_cmpge_epu32_mask(ux, ck), one_i),
                                  _mm512_maskz_mov_epi32(_mm512_cmplt_epu32_mask(ux, ck1), one_i));
    __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i y = _mm512_add_epi32(_mm512_set1_epi32((int)j), oy);
    __m512i x = _mm512_add_epi32(_mm512_add_epi32(_mm512_set1_epi32((int)i0), lane), ox);
    y = _mm512_min_epi32(_mm512_max_epi32(y, zero), _mm512_set1_epi32((int)(F->h - 1)));
    x = _mm512_min_epi32(_mm512_max_epi32(x, zero), _mm512_set1_epi32((int)(F->w - 1)));
    __m512i even = _mm512_set1_epi32(~1);
    __m512 d;
    if (s2 == 1) {
        int64_t r0 = j & ~(int64_t)1, r1 = (j & 1) ? (j + 1 < F->h ? j + 1 : r0) : (j >= 2 ? j - 2 : r0);
        __m512i c = _mm512_sub_epi32(_mm512_and_si512(x, even), _mm512_set1_epi32((int)i0));
        __mmask16 lo_end = _mm512_cmpeq_epi32_mask(c, _mm512_set1_epi32(-2));
        __mmask16 hi_end = _mm512_cmpeq_epi32_mask(c, _mm512_set1_epi32(16));
        __m512i perm = _mm512_and_si512(c, _mm512_set1_epi32(15));
        __m512 row_d[2];
        for (int t = 0; t < 2; t++) {
            const float *row = src + (t ? r1 : r0) * s1;
            __m512 v = _mm512_permutexvar_ps(perm, _mm512_loadu_ps(row + i0));
            if (i0 >= 2) v = _mm512_mask_blend_ps(lo_end, v, _mm512_set1_ps(row[i0 - 2]));
            if (i0 + 16 < F->w) v = _mm512_mask_blend_ps(hi_end, v, _mm512_set1_ps(row[i0 + 16]));
            row_d[t] = v;
        }
        __mmask16 other = _mm512_cmpneq_epi32_mask(_mm512_and_si512(y, even), _mm512_set1_epi32((int)r0));
        d = _mm512_mask_blend_ps(other, row_d[0], row_d[1]);
    } else {
        __m512i at = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_and_si512(y, even), _mm512_set1_epi32((int)s1)),
                                      _mm512_mullo_epi32(_mm512_and_si512(x, even), _mm512_set1_epi32((int)s2)));
        d = _mm512_i32gather_ps(at, src, 4);
    }
    L->d = d, L->oy = oy, L->ox = ox;
    return 0;
}

/* Stage 2: the table's factor f, the lanes drawn (ok) and the normal's first try (dz; slow: the
 * lanes whose normal takes the ziggurat's other paths). */
RW_AVX512 static inline __attribute__((always_inline)) void rw_stage2(const RedwoodFrame *F, uint32_t rs,
                                                                      int64_t j, int64_t i0, RwLanes16 *L) {
    __m512 d = L->d;
    __m512i oy = L->oy, ox = L->ox;
    __m512i one_i = _mm512_set1_epi32(1), zero = _mm512_setzero_si512();
    __m512 one = _mm512_set1_ps(1.0f), two = _mm512_set1_ps(2.0f), half = _mm512_set1_ps(0.5f);
    __m512i i2 = _mm512_cvttps_epi32(_mm512_max_ps(_mm512_mul_ps(_mm512_add_ps(d, one), half), _mm512_set1_ps(-1.0f)));
    __m512i i1 = _mm512_sub_epi32(i2, one_i);
    __m512 a = _mm512_mul_ps(_mm512_sub_ps(d, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(i1), two), one)), half);
    __m512i four = _mm512_set1_epi32(4);
    const int32_t *cy = F->cell_y + j, *cx = F->cell_x + i0;
    __m512i cyv = _mm512_mask_blend_epi32(_mm512_cmplt_epi32_mask(oy, zero), _mm512_set1_epi32(cy[0]), _mm512_set1_epi32(cy[-1]));
    cyv = _mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(oy, zero), cyv, _mm512_set1_epi32(cy[1]));
    __m512i cxv = _mm512_mask_blend_epi32(_mm512_cmplt_epi32_mask(ox, zero), _mm512_loadu_si512(cx), _mm512_loadu_si512(cx - 1));
    cxv = _mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(ox, zero), cxv, _mm512_loadu_si512(cx + 1));
    __m512i cell = _mm512_add_epi32(cyv, cxv);
    /* the two slices as one 64-bit gather of the pair (T[q], T[q + 1]), q = clamp(i1, 0, 3):
     * T[clamp(i1, 0, 4)] is its first but for i1 >= 4, T[min(i2, 4)] its second but for i1 < 0 */
    __m512i at = _mm512_add_epi32(cell, _mm512_min_epi32(_mm512_max_epi32(i1, zero), _mm512_set1_epi32(3)));
    __m512 g0 = _mm512_castpd_ps(_mm512_i32gather_pd(_mm512_castsi512_si256(at), F->table, 4));
    __m512 g1 = _mm512_castpd_ps(_mm512_i32gather_pd(_mm512_extracti64x4_epi64(at, 1), F->table, 4));
    __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    __m512i odds = _mm512_add_epi32(evens, one_i);
    __m512 lo_t = _mm512_permutex2var_ps(g0, evens, g1), hi_t = _mm512_permutex2var_ps(g0, odds, g1);
    __m512 t1 = _mm512_mask_blend_ps(_mm512_cmpge_epi32_mask(i1, four), lo_t, hi_t);
    __m512 t2 = _mm512_mask_blend_ps(_mm512_cmplt_epi32_mask(i1, zero), hi_t, lo_t);
    __m512 f = _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(one, a), t1), _mm512_mul_ps(a, t2));
    __mmask16 ok = _mm512_cmp_ps_mask(d, _mm512_set1_ps(10.0f), _CMP_LT_OQ) &
                   _mm512_cmp_ps_mask(f, _mm512_set1_ps(1e-5f), _CMP_GE_OQ) &
                   _mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    __m512i b = rw_pcg16(_mm512_add_epi32(_mm512_set1_epi32((int)rs), _mm512_loadu_si512(F->draw[2] + i0)));
    __m512i layer = _mm512_and_si512(b, _mm512_set1_epi32(127));
    __m512 u = _mm512_sub_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(b, 8)), _mm512_set1_ps(1.0f / 8388608.0f)), one);
    /* the layer's (edge, ratio) as one 64-bit gather from the interleaved copy */
    __m512 z0 = _mm512_castpd_ps(_mm512_i32gather_pd(_mm512_castsi512_si256(layer), F->zig_pairs, 8));
    __m512 z1 = _mm512_castpd_ps(_mm512_i32gather_pd(_mm512_extracti64x4_epi64(layer, 1), F->zig_pairs, 8));
    __m512 ratio = _mm512_permutex2var_ps(z0, odds, z1);
    __m512 absu = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(u), _mm512_set1_epi32(0x7fffffff)));
    __mmask16 accept = _mm512_cmp_ps_mask(absu, ratio, _CMP_LT_OQ);
    L->dz = _mm512_mul_ps(u, _mm512_permutex2var_ps(z0, evens, z1));
    L->f = f, L->b = b, L->ok = ok;
    L->slow = ok & (__mmask16)~accept;
}

/* The slow lanes' normals, one lane at a time (~1.5 % of lanes). */
RW_AVX512 static __attribute__((noinline)) void rw_slow16(const RedwoodFrame *F, uint32_t rs, int64_t i0, RwLanes16 *L) {
    float z[16];
    uint32_t bb[16];
    _mm512_storeu_ps(z, L->dz);
    _mm512_storeu_si512(bb, L->b);
    for (unsigned m = L->slow; m; m &= m - 1) {   /* the set lanes only (~1 in 4 blocks has one) */
        int l = __builtin_ctz(m);
        z[l] = rw_normal_slow(bb[l], rs + F->draw[3][i0 + l], F->zig);
    }
    L->dz = _mm512_loadu_ps(z);
}

/* Stage 3: the disparity, its rounding, the noisy depth; stored. */
RW_AVX512 static inline __attribute__((always_inline)) void rw_stage3(const RedwoodFrame *F, const RwLanes16 *L,
                                                                      int64_t i0, float *dst) {
    const RedwoodParams *p = F->p;
    __m512 one = _mm512_set1_ps(1.0f);
    __m512 q = _mm512_mul_ps(_mm512_add_ps(_mm512_div_ps(_mm512_mul_ps(_mm512_set1_ps(RW_K35), L->f), L->d),
                                           _mm512_mul_ps(_mm512_mul_ps(L->dz, _mm512_set1_ps(RW_KDZ)), _mm512_set1_ps(p->mult))),
                             _mm512_set1_ps(RW_K8));
    __m512 tq = _mm512_cvtepi32_ps(_mm512_cvttps_epi32(q)), r = _mm512_sub_ps(q, tq);
    __m512 rounded = _mm512_mask_add_ps(tq, _mm512_cmp_ps_mask(r, _mm512_set1_ps(0.5f), _CMP_GE_OQ), tq, one);
    rounded = _mm512_mask_sub_ps(rounded, _mm512_cmp_ps_mask(r, _mm512_set1_ps(-0.5f), _CMP_LE_OQ), rounded, one);
    __m512 absq = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(q), _mm512_set1_epi32(0x7fffffff)));
    __m512 denom = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(absq, _mm512_set1_ps(8388608.0f), _CMP_LT_OQ), q, rounded);
    __m512 v = _mm512_div_ps(_mm512_set1_ps(RW_K35 * RW_K8), denom);
    v = _mm512_maskz_mov_ps(L->ok & _mm512_cmp_ps_mask(denom, _mm512_set1_ps(1e-5f), _CMP_GT_OQ), v);
    if (p->finish) v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(p->lo)), _mm512_set1_ps(p->hi));
    if (p->finish == 2) v = _mm512_mul_ps(_mm512_sub_ps(v, _mm512_set1_ps(p->lo)), _mm512_set1_ps(p->inv));
    _mm512_storeu_ps(dst + i0, v);
}

/* rw_block8 16 pixels wide with AVX-512 (the same steps, masks for lanes). */
RW_AVX512 static inline __attribute__((always_inline)) int rw_block16(const RedwoodFrame *F, const float *src,
                                                                      int64_t s1, int64_t s2, uint32_t rs, int64_t j,
                                                                      int64_t i0, float *dst) {
    RwLanes16 L;
    if (rw_stage1(F, src, s1, s2, rs, j, i0, &L)) return 1;
    rw_stage2(F, rs, j, i0, &L);
    if (L.slow) rw_slow16(F, rs, i0, &L);
    rw_stage3(F, &L, i0, dst);
    return 0;
}

/* Pixels i0..i0+15 of row j alone: a block of 16, else (a far shuffle) two of 8, else pixels. */
RW_AVX512 static void rw_one16(const RedwoodFrame *F, const float *src, int64_t s1, int64_t s2, uint32_t rs,
                               int64_t j, int64_t i0, float *dst) {
    if (rw_block16(F, src, s1, s2, rs, j, i0, dst))
        for (int64_t t = i0; t < i0 + 16; t += 8)
            if (rw_block8(F, src, s1, s2, rs, j, t, dst))
                for (int64_t q = t; q < t + 8; q++) dst[q] = rw_pixel(F, src, s1, s2, rs, j, q);
}

/* RW_GROUP blocks of 16 of row j stage by stage, side by side; a group with a far shuffle goes
 * block by block (rw_block16, then two of 8, then pixels). -> the first column not done. */
#define RW_GROUP 4
RW_AVX512 static int64_t rw_row16(const RedwoodFrame *F, const float *src, int64_t s1, int64_t s2, uint32_t rs,
                                  int64_t j, float *dst) {
    int64_t i = 0;
    for (; i + 16 * RW_GROUP <= F->w; i += 16 * RW_GROUP) {
        RwLanes16 L[RW_GROUP];
        int far = 0;
#pragma GCC unroll 8
        for (int g = 0; g < RW_GROUP; g++) far |= rw_stage1(F, src, s1, s2, rs, j, i + 16 * g, &L[g]);
        if (far) {
            for (int64_t t = i; t < i + 16 * RW_GROUP; t += 16) rw_one16(F, src, s1, s2, rs, j, t, dst);
            continue;
        }
#pragma GCC unroll 8
        for (int g = 0; g < RW_GROUP; g++) rw_stage2(F, rs, j, i + 16 * g, &L[g]);
#pragma GCC unroll 8
        for (int g = 0; g < RW_GROUP; g++)
            if (L[g].slow) rw_slow16(F, rs, i + 16 * g, &L[g]);
#pragma GCC unroll 8
        for (int g = 0; g < RW_GROUP; g++) rw_stage3(F, &L[g], i + 16 * g, dst);
    }
    for (; i + 16 <= F->w; i += 16) rw_one16(F, src, s1, s2, rs, j, i, dst);
    return i;
}

static int rw_avx512(void) {
    static int has = -1;
    if (has < 0) has = __builtin_cpu_supports("avx512f") ? 1 : 0;
    return has;
}

static int rw_avx2(void) {
    static int has = -1;
    if (has < 0) has = __builtin_cpu_supports("avx2") ? 1 : 0;
    return has;
}
#endif

/* Noisy depth of envs [lo, hi): `in` / `out` [N, H, W] float32 with element strides (s_in, s_out:
 * env, row, column); keys / counters [N] int32 (rng); table [80, 80, 5]; zig rng.zig_table();
 * cdf sensors.shuffle_cdf (ncdf entries). `out` may be `in` (same strides): noise in place. Rows
 * go 16 / 8 pixels at a time with AVX-512 / AVX2 where the CPU has them (the same values). 0 on
 * success, -1 when out of memory. */
int bps_redwood_depth(const float *in, float *out, int64_t lo, int64_t hi, int64_t h, int64_t w,
                      const int64_t *s_in, const int64_t *s_out, const int32_t *keys, const int32_t *counters,
                      const float *table, const float *zig, const uint32_t *cdf, int64_t ncdf,
                      const RedwoodParams *p) {
    if (h <= 0 || w <= 0 || hi <= lo) return 0;
    RedwoodFrame F = {.table = table, .zig = zig, .cdf = cdf, .ncdf = ncdf, .h = h, .w = w, .p = p};
    for (int i = 0; i < RW_ZIG_LAYERS; i++) {
        F.zig_pairs[2 * i] = zig[i];
        F.zig_pairs[2 * i + 1] = zig[RW_ZIG_LAYERS + 1 + i];
    }
    for (int k = 0; k < 4; k++) F.draw[k] = malloc(sizeof(uint32_t) * (size_t)w);
    int32_t *cell_x = malloc(sizeof(int32_t) * (size_t)(w + 2)), *cell_y = malloc(sizeof(int32_t) * (size_t)(h + 2));
    int rc = 0;
    if (!F.draw[0] || !F.draw[1] || !F.draw[2] || !F.draw[3] || !cell_x || !cell_y) {
        rc = -1;
        goto done;
    }
    float sx = w > 1 ? 639.0f / (float)(w - 1) : 0.0f, sy = h > 1 ? 479.0f / (float)(h - 1) : 0.0f;
    for (int64_t i = 0; i < w; i++)
        for (int k = 0; k < 4; k++) F.draw[k][i] = rw_pcg((uint32_t)(4 * i + k));
    /* cell_x[x + 1] for x = -1..w: the offsets of the clamped column (likewise rows) */
    for (int64_t x = -1; x <= w; x++) {
        int64_t c = x < 0 ? 0 : (x > w - 1 ? w - 1 : x);
        cell_x[x + 1] = ((int)((float)c * sx + 0.5f) / 8) * 5;
    }
    for (int64_t y = -1; y <= h; y++) {
        int64_t c = y < 0 ? 0 : (y > h - 1 ? h - 1 : y);
        cell_y[y + 1] = ((int)((float)c * sy + 0.5f) / 6) * 400;
    }
    F.cell_x = cell_x + 1;
    F.cell_y = cell_y + 1;
    /* in place (in == out): each env's frame is read from a copy (the shuffle reads neighbours) */
    int inplace = in == out;
    int64_t s1 = inplace ? w : s_in[1], s2 = inplace ? 1 : s_in[2];
    float *copy = inplace ? malloc(sizeof(float) * (size_t)(h * w)) : NULL;
    if (inplace && !copy) {
        rc = -1;
        goto done;
    }
    int vec = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    vec = rw_isa != 0 && rw_avx2() && ncdf >= 5 && s_out[2] == 1 && s1 >= 0 && s2 >= 0 &&
          (h - 1) * s1 + (w - 1) * s2 < ((int64_t)1 << 31) && h < ((int64_t)1 << 30) && w < ((int64_t)1 << 30);
    if (vec && rw_avx512() && rw_isa != 2) vec = 2;
#endif
    for (int64_t e = lo; e < hi; e++) {
        uint32_t h0 = rw_mix32(rw_mix32((uint32_t)keys[e], (uint32_t)counters[e]), 1u /* rng.DEPTH */);
        const float *src = in + e * s_in[0];
        if (inplace) {
            if (s_in[2] == 1 && s_in[1] == w)
                memcpy(copy, src, sizeof(float) * (size_t)(h * w));
            else
                for (int64_t j = 0; j < h; j++)
                    for (int64_t i = 0; i < w; i++) copy[j * w + i] = src[j * s_in[1] + i * s_in[2]];
            src = copy;
        }
        /* the next env's frame is likely out of cache (the render wrote the whole batch): fetch
         * its rows while this env's are computed, a row per row (~3 % of the pass at 1,024 envs
         * of 64x64) */
        const char *next = e + 1 < hi && s_in[2] == 1 ? (const char *)(in + (e + 1) * s_in[0]) : NULL;
        for (int64_t j = 0; j < h; j++) {
            uint32_t rs = rw_pcg(h0 + rw_pcg((uint32_t)j));   /* rng.stream: wp.rand_init(h0, j) */
            float *dst = out + e * s_out[0] + j * s_out[1];
            if (next)
                for (int64_t b = 0; b < w * (int64_t)sizeof(float); b += 64)
                    __builtin_prefetch(next + j * s_in[1] * (int64_t)sizeof(float) + b, 0, 3);
            int64_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
            if (vec == 2)   /* 16 pixels a block, 4 blocks side by side (rw_row16) */
                i = rw_row16(&F, src, s1, s2, rs, j, dst);
            if (vec)
                for (; i + 8 <= w; i += 8)
                    if (rw_block8(&F, src, s1, s2, rs, j, i, dst))
                        for (int64_t t = i; t < i + 8; t++) dst[t] = rw_pixel(&F, src, s1, s2, rs, j, t);
#endif
            for (; i < w; i++) dst[i * s_out[2]] = rw_pixel(&F, src, s1, s2, rs, j, i);
        }
    }
    free(copy);
done:
    for (int k = 0; k < 4; k++) free(F.draw[k]);
    free(cell_x), free(cell_y);
    return rc;
}

/* A scene's shading tables (render/shading_data.py ShadingData, as contiguous arrays) and their
 * sizes. The colour of a hit follows the Warp kernel's `shade` step for step in float32, so the
 * two agree to within one unit (the tests hold both to tests/shading_reference.py).
 *
 * ShadingData checks every cross reference when it is built, but the arrays are Python's and
 * can change after that check, so every index read from a table is checked again here against
 * the sizes below before it is followed: a hit whose lookups leave a table is shaded black and
 * counted (the Python wrapper turns a non-zero count into a typed error). */
typedef struct {
    const int32_t *indices;      /* [T*3] */
    const float *uvs;            /* [V*2] */
    const uint8_t *colors;       /* [V*4] RGBA8, or NULL */
    const int32_t *tri_material; /* [T] */
    const float *tri_lod;        /* [T] per-triangle mip bias */
    const float *mat_color;      /* [M*4] */
    const int32_t *mat_tex;      /* [M] texture id or -1 */
    const uint8_t *tex_data;     /* texture levels, BC1 blocks or RGBA8 */
    const int64_t *level_info;   /* [X*lmax*3] byte offset, width, height */
    int64_t lmax;
    const int32_t *tex_nlevels;  /* [X] */
    const int32_t *tex_format;   /* [X] */
    float pixel_angle;
    float cos_floor;
    int32_t format_bc1;
    int64_t num_tris;            /* rows of indices, tri_material, tri_lod */
    int64_t num_verts;           /* rows of uvs (and colors) */
    int64_t num_mats;            /* rows of mat_color and mat_tex */
    int64_t num_tex;             /* rows of level_info, tex_nlevels, tex_format */
    int64_t tex_bytes;           /* bytes of tex_data */
} Shading;

#define MAX_TEXTURE_SIZE 16384

/* Texel (x, y) of the BC1 block `blk` (the 8 bytes that hold it). */
static void bc1_texel(const uint8_t *blk, int x, int y, float out[3]) {
    int c0 = blk[0] | (blk[1] << 8), c1 = blk[2] | (blk[3] << 8);
    int shift = (((y & 3) << 2) | (x & 3)) << 1;
    int sel = (blk[4 + (shift >> 3)] >> (shift & 7)) & 3;
    int e0[3] = {((c0 >> 11) & 31) << 3 | ((c0 >> 11) & 31) >> 2, ((c0 >> 5) & 63) << 2 | ((c0 >> 5) & 63) >> 4,
                 (c0 & 31) << 3 | (c0 & 31) >> 2};
    int e1[3] = {((c1 >> 11) & 31) << 3 | ((c1 >> 11) & 31) >> 2, ((c1 >> 5) & 63) << 2 | ((c1 >> 5) & 63) >> 4,
                 (c1 & 31) << 3 | (c1 & 31) >> 2};
    for (int k = 0; k < 3; k++) {
        int v = e0[k];
        if (sel == 1) v = e1[k];
        else if (sel == 2) v = c0 > c1 ? (2 * e0[k] + e1[k]) / 3 : (e0[k] + e1[k]) / 2;
        else if (sel == 3) v = c0 > c1 ? (e0[k] + 2 * e1[k]) / 3 : 0;
        out[k] = (float)v;
    }
}

/* One hit's colour, split at the texel fetch so a packet's 16 texel reads can be prefetched
 * together: shading is bound by cache misses (a 64x64 view of a 600K-triangle scan hits a new
 * triangle at nearly every pixel), and issuing the misses of all lanes before using any of
 * them overlaps them. Measured on 1M hits of a synth Gibson scene, one thread: 126 ms shading
 * lane by lane (the same as the Warp CPU kernel), 70 ms in these three stages. */
typedef struct {
    float col[3];
    int tex;          /* texture id, -1 for none */
    int bc1;          /* the texture's format is BC1 (else RGBA8) */
    int64_t offset;   /* byte offset in tex_data of the texel's BC1 block / RGBA8 texel (checked) */
    int x, y;
} Pending;

static inline int outside(int64_t i, int64_t n) { return i < 0 || i >= n; }

/* Everything up to the texel address; 0, or 1 when an index read from a table is outside the
 * table it indexes (nothing outside the tables has been read then). */
static int shade_prepare(const Shading *s, uint32_t f, float bu, float bv, float z, float cos_abs, Pending *p) {
    if ((int64_t)f >= s->num_tris) return 1;
    int32_t i0 = s->indices[3 * (size_t)f], i1 = s->indices[3 * (size_t)f + 1], i2 = s->indices[3 * (size_t)f + 2];
    if (outside(i0, s->num_verts) || outside(i1, s->num_verts) || outside(i2, s->num_verts)) return 1;
    float w0 = 1.0f - bu - bv;
    int32_t m = s->tri_material[f];
    if (outside(m, s->num_mats)) return 1;
    p->col[0] = s->mat_color[4 * m];
    p->col[1] = s->mat_color[4 * m + 1];
    p->col[2] = s->mat_color[4 * m + 2];
    if (s->colors) {
        const uint8_t *a = s->colors + 4 * i0, *b = s->colors + 4 * i1, *c = s->colors + 4 * i2;
        for (int k = 0; k < 3; k++)
            p->col[k] *= (w0 * (float)a[k] + bu * (float)b[k] + bv * (float)c[k]) * (1.0f / 255.0f);
    }
    int32_t t = s->mat_tex[m];
    p->tex = t < 0 ? -1 : t;
    if (t < 0) return 0;
    if (t >= s->num_tex) return 1;
    float u = w0 * s->uvs[2 * i0] + bu * s->uvs[2 * i1] + bv * s->uvs[2 * i2];
    float v = w0 * s->uvs[2 * i0 + 1] + bu * s->uvs[2 * i1 + 1] + bv * s->uvs[2 * i2 + 1];
    float foot = z * s->pixel_angle / fmaxf(cos_abs, s->cos_floor);
    float lod = log2f(fmaxf(foot, 1.0e-30f)) + s->tri_lod[f];
    int lvl = (int)floorf(lod + 0.5f);
    int top = s->tex_nlevels[t] - 1;
    if (top < 0 || top >= s->lmax) return 1;
    lvl = lvl < 0 ? 0 : (lvl > top ? top : lvl);
    const int64_t *li = s->level_info + ((int64_t)t * s->lmax + lvl) * 3;
    int64_t base = li[0], w64 = li[1], h64 = li[2];
    if (base < 0 || w64 < 1 || h64 < 1 || w64 > MAX_TEXTURE_SIZE || h64 > MAX_TEXTURE_SIZE) return 1;
    int wd = (int)w64, ht = (int)h64;
    float fu = u - floorf(u), fv = v - floorf(v);
    int x = (int)(fu * (float)wd), y = (int)(fv * (float)ht);
    x = x < 0 ? 0 : (x < wd - 1 ? x : wd - 1);   /* (NaN uvs land on 0) */
    y = y < 0 ? 0 : (y < ht - 1 ? y : ht - 1);
    p->x = x;
    p->y = y;
    p->bc1 = s->tex_format[t] == s->format_bc1;
    int64_t need = p->bc1 ? 8 : 4;
    p->offset = base + (p->bc1 ? (int64_t)((y >> 2) * ((wd + 3) >> 2) + (x >> 2)) * 8 : ((int64_t)y * wd + x) * 4);
    if (p->offset > s->tex_bytes - need) return 1;
    return 0;
}

static void shade_finish(const Shading *s, Pending *p, uint8_t *out) {
    if (p->tex >= 0) {
        float texel[3];
        const uint8_t *o = s->tex_data + p->offset;
        if (p->bc1) {
            bc1_texel(o, p->x, p->y, texel);
        } else {
            texel[0] = (float)o[0]; texel[1] = (float)o[1]; texel[2] = (float)o[2];
        }
        for (int k = 0; k < 3; k++) p->col[k] *= texel[k] * (1.0f / 255.0f);
    }
    for (int k = 0; k < 3; k++) {
        float c = p->col[k] < 0.0f ? 0.0f : (p->col[k] > 1.0f ? 1.0f : p->col[k]);
        out[k] = (uint8_t)floorf(c * 255.0f + 0.5f);
    }
}

/* Where one traced ray's results go; NULL fields are not written. */
typedef struct {
    float *t;        /* hit distance along the (unnormalized) direction, `miss` when nothing hit */
    int32_t *prim;   /* triangle id, -1 on a miss */
    float *u, *v;    /* barycentrics */
    float *ng;       /* geometric normal, 3 per ray (unnormalized, as Embree returns it) */
    uint8_t *rgb;    /* shaded colour, 3 per ray (needs `shading`) */
    const Shading *shading;
    float miss;
    int64_t bad;     /* hits whose shading lookups left a table (shaded black) */
    int32_t *obj;    /* the hit triangle's instance id (semantic sensor), 0 on a miss */
    const int32_t *tri_object;  /* [num_obj] per-triangle instance ids, or NULL (every id 0) */
    int64_t num_obj;
} Outputs;

/* |cos| of the angle between a hit's normal n and its ray direction d (neither need be unit
 * length): the plain and the instanced trace shade with it. */
static inline float cos_abs(float nx, float ny, float nz, float dx, float dy, float dz) {
    float len = sqrtf(nx * nx + ny * ny + nz * nz) * sqrtf(dx * dx + dy * dy + dz * dz);
    return fabsf(nx * dx + ny * dy + nz * dz) / fmaxf(len, 1.0e-30f);
}

static void shade16(const RayHit16 *rh, int count, Outputs *o, size_t base) {
    const Shading *s = o->shading;
    Pending pend[16];
    int lit[16];
    /* stage 1: start the per-triangle and per-vertex reads of every lane */
    for (int k = 0; k < count; k++) {
        lit[k] = rh->geom_id[k] != RTC_INVALID_ID && rh->tfar[k] > 0.0f;
        if (!lit[k]) continue;
        uint32_t f = rh->prim_id[k];
        if ((int64_t)f >= s->num_tris) continue;   /* shade_prepare reports it */
        __builtin_prefetch(s->indices + 3 * (size_t)f);
        __builtin_prefetch(s->tri_material + f);
        __builtin_prefetch(s->tri_lod + f);
    }
    for (int k = 0; k < count; k++) {
        if (!lit[k] || (int64_t)rh->prim_id[k] >= s->num_tris) continue;
        const int32_t *tri = s->indices + 3 * (size_t)rh->prim_id[k];
        for (int j = 0; j < 3; j++) {
            __builtin_prefetch(s->uvs + 2 * (size_t)tri[j]);
            if (s->colors) __builtin_prefetch(s->colors + 4 * (size_t)tri[j]);
        }
    }
    /* stage 2: everything up to the texel address, then start the texel reads */
    for (int k = 0; k < count; k++) {
        if (!lit[k]) continue;
        float c = cos_abs(rh->ng_x[k], rh->ng_y[k], rh->ng_z[k], rh->dir_x[k], rh->dir_y[k], rh->dir_z[k]);
        if (shade_prepare(s, rh->prim_id[k], rh->u[k], rh->v[k], rh->tfar[k], c, &pend[k])) {
            lit[k] = 0;
            o->bad++;
            continue;
        }
        if (pend[k].tex >= 0) __builtin_prefetch(s->tex_data + pend[k].offset);
    }
    /* stage 3: colours */
    for (int k = 0; k < count; k++) {
        uint8_t *c = o->rgb + 3 * (base + (size_t)k);
        if (lit[k]) {
            shade_finish(s, &pend[k], c);
        } else {
            c[0] = c[1] = c[2] = 0;
        }
    }
}

/* A packet's rays ready for intersect16 (origins and directions already set): lanes k < count
 * valid, the rest idle; the ray extent [0, inf), every mask bit, no hit yet (geometry, triangle
 * and top-level instance ids invalid, as Embree asks of a query). */
static void packet_reset(RayHit16 *rh, int count, int valid[16]) {
    for (int k = 0; k < 16; k++) {
        valid[k] = k < count ? -1 : 0;
        rh->tnear[k] = 0.0f;
        rh->time[k] = 0.0f;
        rh->tfar[k] = INFINITY;
        rh->mask[k] = 0xFFFFFFFFu;
        rh->id[k] = (uint32_t)k;
        rh->flags[k] = 0;
        rh->geom_id[k] = rh->prim_id[k] = rh->inst_tail[0][k] = RTC_INVALID_ID;
    }
}

/* 0 when the camera inputs hold what `agents` / `ndirs` say, else the negative code of the first
 * short one: -1 origins, -2 rotations, -3 dirs (bps_trace_cameras and its instanced form). */
static int64_t camera_inputs_short(size_t agents, size_t origin_rows, size_t rotation_rows, size_t ndirs,
                                   size_t dir_floats) {
    if (origin_rows < agents) return -1;
    if (rotation_rows < agents) return -2;
    if (dir_floats / 3 < ndirs) return -3;
    return 0;
}

static void trace16(RTCScene scene, RayHit16 *rh, int count, Outputs *o, size_t base) {
    int valid[16];
    packet_reset(rh, count, valid);
    E.intersect16(valid, scene, rh, NULL);
    if (o->rgb) shade16(rh, count, o, base);
    if (o->obj) {
        /* one int32 load per hit, from the triangle id Embree already returned: the semantic
         * sensor costs no extra ray (a triangle id outside the table reads as "no object") */
        for (int k = 0; k < count; k++) {
            uint32_t f = rh->prim_id[k];
            int ok = rh->geom_id[k] != RTC_INVALID_ID && o->tri_object && (int64_t)f < o->num_obj;
            o->obj[base + (size_t)k] = ok ? o->tri_object[f] : 0;
        }
    }
    for (int k = 0; k < count; k++) {
        size_t i = base + (size_t)k;
        int hit = rh->geom_id[k] != RTC_INVALID_ID;
        if (o->t) o->t[i] = hit ? rh->tfar[k] : o->miss;
        if (o->prim) o->prim[i] = hit ? (int32_t)rh->prim_id[k] : -1;
        if (o->u) o->u[i] = hit ? rh->u[k] : 0.0f;
        if (o->v) o->v[i] = hit ? rh->v[k] : 0.0f;
        if (o->ng) {
            o->ng[3 * i + 0] = hit ? rh->ng_x[k] : 0.0f;
            o->ng[3 * i + 1] = hit ? rh->ng_y[k] : 0.0f;
            o->ng[3 * i + 2] = hit ? rh->ng_z[k] : 0.0f;
        }
    }
}

/* Trace n given rays (origins and directions, n x 3 float32 each). */
void bps_trace_rays(void *scene, size_t n, const float *org, const float *dir, float *t, int32_t *prim,
                    float *u, float *v, float *ng, float miss) {
    Outputs o = {.t = t, .prim = prim, .u = u, .v = v, .ng = ng, .miss = miss};
    RayHit16 rh;
    for (size_t i0 = 0; i0 < n; i0 += 16) {
        int count = (int)(n - i0 < 16 ? n - i0 : 16);
        for (int k = 0; k < count; k++) {
            const float *a = org + 3 * (i0 + k), *d = dir + 3 * (i0 + k);
            rh.org_x[k] = a[0]; rh.org_y[k] = a[1]; rh.org_z[k] = a[2];
            rh.dir_x[k] = d[0]; rh.dir_y[k] = d[1]; rh.dir_z[k] = d[2];
        }
        for (int k = count; k < 16; k++) {
            rh.org_x[k] = rh.org_y[k] = rh.org_z[k] = 0.0f;
            rh.dir_x[k] = rh.dir_y[k] = 0.0f;
            rh.dir_z[k] = -1.0f;
        }
        trace16(scene, &rh, count, &o, i0);
    }
}

/* One packet of an agent's camera rays: lanes k < count start at the agent's origin p and go
 * along its rotation r (3x3 row-major, camera -> world) times dirs[k]; the idle lanes repeat
 * lane 0's ray. */
static void camera_packet(RayHit16 *rh, const float *p, const float *r, const float *dirs, int count) {
    for (int k = 0; k < 16; k++) {
        const float *d = dirs + 3 * (k < count ? k : 0);
        rh->org_x[k] = p[0]; rh->org_y[k] = p[1]; rh->org_z[k] = p[2];
        rh->dir_x[k] = r[0] * d[0] + r[1] * d[1] + r[2] * d[2];
        rh->dir_y[k] = r[3] * d[0] + r[4] * d[1] + r[5] * d[2];
        rh->dir_z[k] = r[6] * d[0] + r[7] * d[1] + r[8] * d[2];
    }
}

/* Trace the camera rays of `agents` agents: agent a's rays start at origins[a] (3 floats) and go
 * along rotations[a] (3x3 row-major, camera -> world) times each of the `ndirs` camera-frame
 * directions `dirs` (ndirs x 3). Results for agent a, ray j go to index a * ndirs + j; the
 * world-space directions too when `world_dirs` is not NULL, and the shaded colour of each hit
 * when `rgb` and `shading` are (shading right after each packet: no hit arrays at all), and
 * the hit triangle's instance id when `obj` is (`tri_object[prim]`, `num_obj` ids, NULL: 0s).
 * `origin_rows` / `rotation_rows` are the rows the two arrays hold and `dir_floats` the floats of
 * `dirs`; the output arrays must hold agents * ndirs rays. Returns a negative code, having traced
 * nothing, when the inputs are smaller than `agents` / `ndirs` say (-1 origins, -2 rotations,
 * -3 dirs), else the number of hits whose shading lookups left a table (see Shading). */
int64_t bps_trace_cameras(void *scene, size_t agents, const float *origins, size_t origin_rows,
                          const float *rotations, size_t rotation_rows, size_t ndirs, const float *dirs,
                          size_t dir_floats, float *t, int32_t *prim, float *u, float *v, float *ng,
                          float *world_dirs, uint8_t *rgb, const Shading *shading, int32_t *obj,
                          const int32_t *tri_object, size_t num_obj, float miss) {
    int64_t short_input = camera_inputs_short(agents, origin_rows, rotation_rows, ndirs, dir_floats);
    if (short_input) return short_input;
    Outputs o = {.t = t, .prim = prim, .u = u, .v = v, .ng = ng, .rgb = shading ? rgb : NULL, .shading = shading,
                 .miss = miss, .obj = obj, .tri_object = tri_object, .num_obj = (int64_t)num_obj};
    RayHit16 rh;
    for (size_t a = 0; a < agents; a++) {
        const float *p = origins + 3 * a, *r = rotations + 9 * a;
        for (size_t j0 = 0; j0 < ndirs; j0 += 16) {
            int count = (int)(ndirs - j0 < 16 ? ndirs - j0 : 16);
            camera_packet(&rh, p, r, dirs + 3 * j0, count);
            if (world_dirs) {
                float *w = world_dirs + 3 * (a * ndirs + j0);
                for (int k = 0; k < count; k++) {
                    w[3 * k + 0] = rh.dir_x[k]; w[3 * k + 1] = rh.dir_y[k]; w[3 * k + 2] = rh.dir_z[k];
                }
            }
            trace16(scene, &rh, count, &o, a * ndirs + j0);
        }
    }
    return o.bad;
}

/* ---- Instances (composed scenes): one top-level scene whose geometries are instances of
 * committed per-asset scenes (bps_scene_build), each with its own 3x4 transform; the asset's
 * scene is shared by all its instances (and by every top-level scene that uses it). Kept apart
 * from the mesh API above: its extra symbols are looked up by bps_load_instancing. */
enum { RTC_GEOMETRY_TYPE_INSTANCE = 121, RTC_FORMAT_FLOAT3X4_ROW_MAJOR = 0x9134 };

static struct {
    void (*setGeometryInstancedScene)(RTCGeometry, RTCScene);
    void (*setGeometryTransform)(RTCGeometry, unsigned, int, const float *);
} EI;

/* 0: ready; 2: a symbol is missing (or bps_load has not succeeded). */
int bps_load_instancing(void) {
    if (!E.lib) return 2;
    if (EI.setGeometryTransform) return 0;
    void *a = dlsym(E.lib, "rtcSetGeometryInstancedScene"), *b = dlsym(E.lib, "rtcSetGeometryTransform");
    if (!a || !b) return 2;
    *(void **)(&EI.setGeometryInstancedScene) = a;
    *(void **)(&EI.setGeometryTransform) = b;
    return 0;
}

/* n instances: scenes[i] (a committed scene) placed by xfm[12 i .. 12 i + 11] (3x4 row-major,
 * local -> world). Instance i is geometry i of the returned scene (the hit's instID). NULL on
 * error (see bps_device_error). */
void *bps_instances_build(void *dev, void *const *scenes, size_t n, const float *xfm, int quality) {
    RTCScene top = E.newScene(dev);
    if (!top) return NULL;
    E.setSceneBuildQuality(top, quality);
    for (size_t i = 0; i < n; i++) {
        RTCGeometry g = E.newGeometry(dev, RTC_GEOMETRY_TYPE_INSTANCE);
        if (!g) {
            E.releaseScene(top);
            return NULL;
        }
        EI.setGeometryInstancedScene(g, scenes[i]);
        EI.setGeometryTransform(g, 0, RTC_FORMAT_FLOAT3X4_ROW_MAJOR, xfm + 12 * i);
        E.commitGeometry(g);
        E.attachGeometry(top, g);
        E.releaseGeometry(g);
    }
    return commit_checked(dev, top);
}

/* Per-instance tables of a top-level scene (n rows each). */
typedef struct {
    int64_t n;
    const Shading *const *shading; /* the instance's asset's tables (NULL: no RGB) */
    const float *normal_xf;        /* 9 floats, row-major: inverse-transpose of the linear part
                                      (Embree returns an instance hit's normal in asset space) */
    const float *lod_scale;        /* footprint factor: the asset's lod bias is per asset-space area */
    const int32_t *object;         /* semantic id of every pixel that hits the instance */
} Instances;

/* bps_trace_cameras (same ray layout and camera arguments) on a top-level instance scene:
 * distance `t`, RGB (when `rgb`, shaded with the hit instance's asset tables) and the hit
 * instance's semantic id (when `obj`). Returns -1..-3 as bps_trace_cameras, else the number of
 * hits whose instance id or shading lookups left a table (shaded black, semantic 0). */
int64_t bps_trace_cameras_instanced(void *scene, const Instances *in, size_t agents, const float *origins,
                                    size_t origin_rows, const float *rotations, size_t rotation_rows, size_t ndirs,
                                    const float *dirs, size_t dir_floats, float *t, uint8_t *rgb, int32_t *obj,
                                    float miss) {
    int64_t short_input = camera_inputs_short(agents, origin_rows, rotation_rows, ndirs, dir_floats);
    if (short_input) return short_input;
    int64_t bad = 0;
    RayHit16 rh;
    Pending pend[16];
    for (size_t a = 0; a < agents; a++) {
        const float *p = origins + 3 * a, *r = rotations + 9 * a;
        for (size_t j0 = 0; j0 < ndirs; j0 += 16) {
            int count = (int)(ndirs - j0 < 16 ? ndirs - j0 : 16);
            int valid[16];
            camera_packet(&rh, p, r, dirs + 3 * j0, count);
            packet_reset(&rh, count, valid);
            E.intersect16(valid, scene, &rh, NULL);
            int lit[16];
            for (int k = 0; k < count; k++) {
                size_t i = a * ndirs + j0 + (size_t)k;
                uint32_t inst = rh.inst_tail[0][k];
                int hit = rh.geom_id[k] != RTC_INVALID_ID;
                int known = hit && (int64_t)inst < in->n;
                if (hit && !known) bad++;
                lit[k] = known && rgb && in->shading && in->shading[inst];
                t[i] = hit ? rh.tfar[k] : miss;
                if (obj) obj[i] = known ? in->object[inst] : 0;
                if (!lit[k]) continue;
                const Shading *s = in->shading[inst];
                const float *m = in->normal_xf + 9 * (size_t)inst;
                float lx = rh.ng_x[k], ly = rh.ng_y[k], lz = rh.ng_z[k];
                float nx = m[0] * lx + m[1] * ly + m[2] * lz, ny = m[3] * lx + m[4] * ly + m[5] * lz,
                      nz = m[6] * lx + m[7] * ly + m[8] * lz;
                float c = cos_abs(nx, ny, nz, rh.dir_x[k], rh.dir_y[k], rh.dir_z[k]);
                if (shade_prepare(s, rh.prim_id[k], rh.u[k], rh.v[k], rh.tfar[k] * in->lod_scale[inst], c, &pend[k])) {
                    lit[k] = 0;
                    bad++;
                    continue;
                }
                if (pend[k].tex >= 0) __builtin_prefetch(s->tex_data + pend[k].offset);
            }
            if (!rgb) continue;
            for (int k = 0; k < count; k++) {
                uint8_t *c = rgb + 3 * (a * ndirs + j0 + (size_t)k);
                if (lit[k]) shade_finish(in->shading[rh.inst_tail[0][k]], &pend[k], c);
                else c[0] = c[1] = c[2] = 0;
            }
        }
    }
    return bad;
}

/* Importable as a module only so that setuptools builds and installs it; it has no methods. */
static struct PyModuleDef bridge_module = {
    PyModuleDef_HEAD_INIT, .m_name = "_embree_bridge", .m_doc = "ctypes-loaded bridge over Embree 4 (see the C source)", .m_size = -1};

PyMODINIT_FUNC PyInit__embree_bridge(void) { return PyModule_Create(&bridge_module); }
