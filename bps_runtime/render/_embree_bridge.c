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
    void (*commitScene)(RTCScene);
    RTCGeometry (*newGeometry)(RTCDevice, int);
    void (*setSharedGeometryBuffer)(RTCGeometry, int, unsigned, int, const void *, size_t, size_t, size_t);
    void (*commitGeometry)(RTCGeometry);
    unsigned (*attachGeometry)(RTCScene, RTCGeometry);
    void (*releaseGeometry)(RTCGeometry);
    void (*intersect16)(const int *, RTCScene, RayHit16 *, void *);
} E;

#define LOAD(field, name)                               \
    do {                                                \
        *(void **)(&E.field) = dlsym(lib, name);        \
        if (!E.field) return 2;                         \
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

/* One triangle mesh as a committed scene. `vertices` (nv x float3, stride 12, padded by one
 * float so Embree's 16-byte loads stay inside) and `triangles` (nt x uint3) are shared, not
 * copied: the caller keeps them alive while the scene lives. NULL on error (see
 * bps_device_error). */
void *bps_scene_build(void *dev, const float *vertices, size_t nv, const uint32_t *triangles, size_t nt,
                      int quality) {
    RTCScene scene = E.newScene(dev);
    if (!scene) return NULL;
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
    E.commitScene(scene);
    const char *msg;
    if (bps_device_error(dev, &msg)) {
        E.releaseScene(scene);
        return NULL;
    }
    return scene;
}

void bps_scene_release(void *scene) { E.releaseScene(scene); }

/* Where one traced ray's results go; NULL fields are not written. */
typedef struct {
    float *t;        /* hit distance along the (unnormalized) direction, `miss` when nothing hit */
    int32_t *prim;   /* triangle id, -1 on a miss */
    float *u, *v;    /* barycentrics */
    float *ng;       /* geometric normal, 3 per ray (unnormalized, as Embree returns it) */
    float miss;
} Outputs;

static void trace16(RTCScene scene, RayHit16 *rh, int count, const Outputs *o, size_t base) {
    int valid[16];
    for (int k = 0; k < 16; k++) {
        valid[k] = k < count ? -1 : 0;
        rh->tnear[k] = 0.0f;
        rh->time[k] = 0.0f;
        rh->tfar[k] = INFINITY;
        rh->mask[k] = 0xFFFFFFFFu;
        rh->id[k] = (uint32_t)k;
        rh->flags[k] = 0;
        rh->geom_id[k] = RTC_INVALID_ID;
        rh->prim_id[k] = RTC_INVALID_ID;
    }
    E.intersect16(valid, scene, rh, NULL);
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
    Outputs o = {t, prim, u, v, ng, miss};
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

/* Trace the camera rays of `agents` agents: agent a's rays start at origins[a] (3 floats) and go
 * along rotations[a] (3x3 row-major, camera -> world) times each of the `ndirs` camera-frame
 * directions `dirs` (ndirs x 3). Results for agent a, ray j go to index a * ndirs + j; the
 * world-space directions too when `world_dirs` is not NULL (shading needs them). */
void bps_trace_cameras(void *scene, size_t agents, const float *origins, const float *rotations,
                       size_t ndirs, const float *dirs, float *t, int32_t *prim, float *u, float *v,
                       float *ng, float *world_dirs, float miss) {
    Outputs o = {t, prim, u, v, ng, miss};
    RayHit16 rh;
    for (size_t a = 0; a < agents; a++) {
        const float *p = origins + 3 * a, *r = rotations + 9 * a;
        for (size_t j0 = 0; j0 < ndirs; j0 += 16) {
            int count = (int)(ndirs - j0 < 16 ? ndirs - j0 : 16);
            for (int k = 0; k < 16; k++) {
                const float *d = dirs + 3 * (j0 + (k < count ? k : 0));
                rh.org_x[k] = p[0]; rh.org_y[k] = p[1]; rh.org_z[k] = p[2];
                rh.dir_x[k] = r[0] * d[0] + r[1] * d[1] + r[2] * d[2];
                rh.dir_y[k] = r[3] * d[0] + r[4] * d[1] + r[5] * d[2];
                rh.dir_z[k] = r[6] * d[0] + r[7] * d[1] + r[8] * d[2];
            }
            if (world_dirs) {
                float *w = world_dirs + 3 * (a * ndirs + j0);
                for (int k = 0; k < count; k++) {
                    w[3 * k + 0] = rh.dir_x[k]; w[3 * k + 1] = rh.dir_y[k]; w[3 * k + 2] = rh.dir_z[k];
                }
            }
            trace16(scene, &rh, count, &o, a * ndirs + j0);
        }
    }
}

/* Importable as a module only so that setuptools builds and installs it; it has no methods. */
static struct PyModuleDef bridge_module = {PyModuleDef_HEAD_INIT, "_embree_bridge",
                                           "ctypes-loaded bridge over Embree 4 (see the C source)", -1,
                                           NULL};

PyMODINIT_FUNC PyInit__embree_bridge(void) { return PyModule_Create(&bridge_module); }
