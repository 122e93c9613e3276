/*
 * Single-source Dijkstra over a CSR graph, called through ctypes (so with the GIL released).
 *
 * Why: scipy.sparse.csgraph.dijkstra holds the GIL for its whole run (~15-50 ms per distance
 * field on a 60K-span navmesh), and the runtime computes fields in background threads while
 * the step loop runs; every GIL hand-over then waited for a whole field. See
 * bps_assets/nav/geodesic.py.
 *
 * A binary heap with lazy deletion; ties are irrelevant to the distances returned.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    double d;
    int64_t v;
} Item;

static int push(Item **heap, int64_t *size, int64_t *cap, double d, int64_t v) {
    if (*size == *cap) {
        int64_t ncap = *cap * 2;
        Item *h = realloc(*heap, (size_t)ncap * sizeof(Item));
        if (!h) return -1;
        *heap = h;
        *cap = ncap;
    }
    Item *h = *heap;
    int64_t i = (*size)++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (h[p].d <= d) break;
        h[i] = h[p];
        i = p;
    }
    h[i].d = d;
    h[i].v = v;
    return 0;
}

static Item pop(Item *h, int64_t *size) {
    Item top = h[0];
    Item last = h[--(*size)];
    int64_t n = *size, i = 0;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1].d < h[c].d) c++;
        if (h[c].d >= last.d) break;
        h[i] = h[c];
        i = c;
    }
    if (n > 0) h[i] = last;
    return top;
}

/* Distances into dist [n] over the n-node graph (indptr [n+1] int64, indices int32, weights
 * float64 >= 0) from a virtual source joined to `nseeds` nodes `seeds` at distances `seed_dist`;
 * nodes farther than `limit` or unreachable get +inf. Returns 0, or -1 when out of memory, -2 on
 * an out-of-range index or seed. */
int bps_dijkstra(int64_t n, const int64_t *indptr, const int32_t *indices, const double *weights,
                 int64_t nseeds, const int64_t *seeds, const double *seed_dist, double limit, double *dist) {
    for (int64_t i = 0; i < n; i++) dist[i] = INFINITY;
    unsigned char *done = calloc((size_t)n, 1);
    int64_t cap = n < 1024 ? 1024 : n, size = 0;
    Item *heap = malloc((size_t)cap * sizeof(Item));
    int rc = 0;
    if (!done || !heap) {
        rc = -1;
        goto out;
    }
    for (int64_t k = 0; k < nseeds; k++) {
        int64_t v = seeds[k];
        if (v < 0 || v >= n) {
            rc = -2;
            goto out;
        }
        if (seed_dist[k] < dist[v] && seed_dist[k] <= limit) {
            dist[v] = seed_dist[k];
            if (push(&heap, &size, &cap, seed_dist[k], v)) {
                rc = -1;
                goto out;
            }
        }
    }
    while (size > 0) {
        Item it = pop(heap, &size);
        int64_t u = it.v;
        if (done[u]) continue;
        done[u] = 1;
        for (int64_t e = indptr[u]; e < indptr[u + 1]; e++) {
            int64_t v = indices[e];
            if (v < 0 || v >= n) {
                rc = -2;
                goto out;
            }
            double nd = it.d + weights[e];
            if (nd < dist[v] && nd <= limit) {
                dist[v] = nd;
                if (push(&heap, &size, &cap, nd, v)) {
                    rc = -1;
                    goto out;
                }
            }
        }
    }
out:
    free(done);
    free(heap);
    return rc;
}

static struct PyModuleDef dijkstra_module = {
    PyModuleDef_HEAD_INIT, .m_name = "_dijkstra", .m_doc = "ctypes-loaded Dijkstra (see the C source)", .m_size = -1};

PyMODINIT_FUNC PyInit__dijkstra(void) { return PyModule_Create(&dijkstra_module); }
