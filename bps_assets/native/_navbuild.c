/*
 * Navmesh build loops, called through ctypes: the build's sub-cell obstacle test
 * (bps_assets/nav/build.py ``_blocked_samples``) and the geodesic graph's line-of-sight walks
 * (bps_assets/nav/geodesic.py ``line_of_sight``, for the corner nodes' edges).
 *
 * Why: the exact-radius erosion tests every (cell, triangle piece) pair next to the walkable
 * area at K sub-cell samples; in numpy that is ~20 temporaries of [pairs, K] per edge and was
 * about a third of a Gibson-size build (issue 12). This loop computes the same float32
 * arithmetic in the same order as ``_near_triangle`` (built with -ffp-contract=off), so the
 * compiled and the numpy paths block the same samples.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>

/* For each pair p (rows[p] sorted or not), OR into out[rows[p] * K + k] whether sample k of the
 * cell whose corner is (cx0[p], cz0[p]) lies within sqrt(tol2) (x/z) of triangle p's
 * projection (tri [P, 6]: ax az bx bz cx cz, float64), or inside it. Sample k is at
 * (cx0[p] + gx[k], cz0[p] + gz[k]) in float32. Returns 0, or -2 on a row outside [0, nrows). */
int bps_near_samples(int64_t P, const double *tri, const float *cx0, const float *cz0, const int64_t *rows,
                     int64_t nrows, int64_t K, const float *gx, const float *gz, float tol2, uint8_t *out) {
    for (int64_t p = 0; p < P; p++) {
        int64_t r = rows[p];
        if (r < 0 || r >= nrows) return -2;
        const double *t = tri + 6 * p;
        uint8_t *o = out + r * K;
        /* edges (A,B), (B,C), (C,A): start point and direction, as numpy computes them */
        double sx[3] = {t[0], t[2], t[4]}, sz[3] = {t[1], t[3], t[5]};
        double nx[3] = {t[2], t[4], t[0]}, nz[3] = {t[3], t[5], t[1]};
        float ex[3], ez[3], px[3], pz[3], L2[3];
        for (int e = 0; e < 3; e++) {
            ex[e] = (float)(nx[e] - sx[e]);
            ez[e] = (float)(nz[e] - sz[e]);
            px[e] = (float)sx[e];
            pz[e] = (float)sz[e];
            L2[e] = ex[e] * ex[e] + ez[e] * ez[e];
        }
        for (int64_t k = 0; k < K; k++) {
            if (o[k]) continue;
            float X = cx0[p] + gx[k], Z = cz0[p] + gz[k];
            int pos = 1, neg = 1, near = 0;
            for (int e = 0; e < 3; e++) {
                float dx = X - px[e], dz = Z - pz[e];
                float cross = ex[e] * dz - ez[e] * dx;
                pos &= cross >= 0.0f;
                neg &= cross <= 0.0f;
                float den = L2[e] > 0.0f ? L2[e] : 1.0f;
                float u = (dx * ex[e] + dz * ez[e]) / den;
                u = u < 0.0f ? 0.0f : (u > 1.0f ? 1.0f : u);
                dx -= u * ex[e];
                dz -= u * ez[e];
                near |= dx * dx + dz * dz <= tol2;
            }
            if (near || pos || neg) o[k] = 1;
        }
    }
    return 0;
}

/* For each segment i, from pa[i] (in span sa[i]) to pb[i] (x/z of [N, 3] float64 rows): walk the
 * cells it crosses through the span links nbr [(S + 1) * 4] (row S and the value S mean none);
 * out[i] = 1 when the walk ends in span sb[i]. The crossing parameters are computed as
 * geodesic.py's numpy walk computes them, and ties cross x first (its stable sort), so both
 * give the same answer. Returns 0, or -2 on a span id outside [0, S]. */
int bps_line_of_sight(int64_t N, const int64_t *sa, const double *pa, const int64_t *sb, const double *pb,
                      const int64_t *nbr, int64_t S, double ox, double oz, double cs, uint8_t *out) {
    for (int64_t i = 0; i < N; i++) {
        int64_t cur = sa[i];
        if (cur < 0 || cur > S) return -2;
        double a[2] = {pa[3 * i], pa[3 * i + 2]}, b[2] = {pb[3 * i], pb[3 * i + 2]}, o[2] = {ox, oz};
        double ia[2], step[2];
        int64_t n[2], k[2] = {1, 1};
        int dir[2];
        for (int ax = 0; ax < 2; ax++) {
            ia[ax] = floor((a[ax] - o[ax]) / cs);
            double ib = floor((b[ax] - o[ax]) / cs);
            n[ax] = (int64_t)fabs(ib - ia[ax]);
            step[ax] = ib > ia[ax] ? 1.0 : (ib < ia[ax] ? -1.0 : 0.0);
            dir[ax] = step[ax] > 0 ? (ax == 0 ? 0 : 1) : (ax == 0 ? 2 : 3);
        }
        while (k[0] <= n[0] || k[1] <= n[1]) {
            double t[2];
            for (int ax = 0; ax < 2; ax++) {
                if (k[ax] > n[ax]) {
                    t[ax] = INFINITY;
                    continue;
                }
                double kk = step[ax] > 0 ? (double)k[ax] : (double)(1 - k[ax]);
                double line = o[ax] + (ia[ax] + kk) * cs;
                t[ax] = (line - a[ax]) / (b[ax] - a[ax]);
            }
            int ax = t[1] < t[0] ? 1 : 0;
            k[ax]++;
            cur = nbr[4 * cur + dir[ax]];
            if (cur < 0 || cur > S) return -2;
        }
        out[i] = cur == sb[i];
    }
    return 0;
}

static struct PyModuleDef navbuild_module = {
    PyModuleDef_HEAD_INIT, .m_name = "_navbuild", .m_doc = "ctypes-loaded navmesh build loops (see the C source)",
    .m_size = -1};

PyMODINIT_FUNC PyInit__navbuild(void) { return PyModule_Create(&navbuild_module); }
