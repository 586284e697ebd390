/*
 * A stand-in for NVIDIA's NVML library (libnvidia-ml.so.1), for kubegpu's integration tests.
 *
 * The real nvidia-ml-py (`pynvml`) loads this library through its normal search (dlopen of
 * "libnvidia-ml.so.1", found through LD_LIBRARY_PATH), so every NVML path of kubegpu runs through
 * pynvml's own ctypes layer: struct layouts, nvmlReturn_t codes, the version-suffixed symbols
 * (_v2, _v3, the "V" profile calls with their version words), byte strings and MIG handles.
 *
 * Signatures, struct layouts, constants and return codes follow NVIDIA's nvml.h of NVML API
 * version 12 (CUDA 12.4, driver branch r550), as nvidia-ml-py 12.550+ binds them. What kubegpu
 * calls is implemented, and what NVIDIA's device plugin and GFD call on the same machines
 * (nvmlDeviceGetMinorNumber, nvmlDeviceGetCudaComputeCapability, nvmlDeviceGetHandleByUUID, the
 * MIG-handle, compute-instance and fabric queries), each failing with the code nvml.h documents for
 * the case (e.g. nvmlDeviceGetMaxMigDeviceCount is 0 while MIG is off, and
 * nvmlDeviceGetMigDeviceHandleByIndex is NOT_SUPPORTED then, NOT_FOUND for an empty slot). So is the
 * telemetry dcgm-exporter's default counters need (memory clock, HBM temperature through
 * nvmlDeviceGetFieldValues, energy, PCIe replays, encoder/decoder utilisation, v2 memory info with
 * the reserved framebuffer, remapped rows, GPU performance monitoring: nvmlGpm*), "not supported"
 * where the machine's GPU lacks it. Any other
 * symbol is absent, so pynvml raises NVMLError_FunctionNotFound for it, as with an older driver.
 *
 * The machine comes from the file named by KUBEGPU_NVML_MACHINE, read at nvmlInit: the compiled
 * form of a YAML machine description (tests/nvml_standin/machine.py writes it; its format is
 * documented there). Two more files are watched while the library runs:
 *   KUBEGPU_NVML_FAULTS  `fail SYMBOL CODE GPU` lines (GPU -1: every GPU), re-read when it changes,
 *                        so a test can make a call fail from now on (GPU lost, no permission...).
 *   KUBEGPU_NVML_EVENTS  `event GPU TYPE DATA` lines, appended by a test; nvmlEventSetWait_v2
 *                        delivers each new one to the event sets that registered that GPU and type.
 * State changes (MIG mode, GPU and compute instances) live in this process only.
 */

#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <pthread.h>

/* ---------------------------------------------------------------- nvml.h: types and constants */

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_NVLINK_MAX_LINKS 18
#define NVML_TEMPERATURE_GPU 0
#define NVML_CLOCK_SM 1
#define NVML_CLOCK_MEM 2
#define NVML_FI_DEV_MEMORY_TEMP 82
#define NVML_VALUE_TYPE_UNSIGNED_INT 1
#define NVML_GPM_METRICS_GET_VERSION 1
#define NVML_GPM_SUPPORT_VERSION 1
#define MAX_GPM_SAMPLES 256
#define NVML_MEMORY_ERROR_TYPE_CORRECTED 0
#define NVML_MEMORY_ERROR_TYPE_UNCORRECTED 1
#define NVML_VOLATILE_ECC 0
#define NVML_AGGREGATE_ECC 1
#define NVML_DEVICE_MIG_DISABLE 0
#define NVML_DEVICE_MIG_ENABLE 1
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0
#define nvmlEventTypeSingleBitEccError 0x1ULL
#define nvmlEventTypeDoubleBitEccError 0x2ULL
#define nvmlEventTypeXidCriticalError 0x8ULL
#define NVML_STRUCT_VERSION(size, ver) ((unsigned int)(size) | ((ver) << 24U))

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;
typedef struct nvmlGpuInstance_st *nvmlGpuInstance_t;
typedef struct nvmlComputeInstance_st *nvmlComputeInstance_t;

typedef struct {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 NVML_STRUCT_VERSION(sizeof(nvmlMemory_v2_t), 2)

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    signed int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

/* GPU performance monitoring (nvml.h: nvmlGpm*): an opaque sample, metrics computed between two. */
typedef struct nvmlGpmSample_st *nvmlGpmSample_t;

typedef struct {
    char *shortName;
    char *longName;
    char *unit;
} nvmlGpmMetricInfo_t;

typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    nvmlGpmMetricInfo_t metricInfo;
} nvmlGpmMetric_t;

typedef struct {
    unsigned int version;
    unsigned int numMetrics;
    nvmlGpmSample_t sample1;
    nvmlGpmSample_t sample2;
    nvmlGpmMetric_t metrics[]; /* NVML_GPM_METRIC_MAX in nvml.h; only numMetrics are read or written */
} nvmlGpmMetricsGet_t;

typedef struct {
    unsigned int version;
    unsigned int isSupportedDevice;
} nvmlGpmSupport_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

typedef struct {
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    unsigned int gpuInstanceSliceCount;
    unsigned int computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

typedef struct {
    unsigned int start;
    unsigned int size;
} nvmlGpuInstancePlacement_t;

typedef struct {
    nvmlDevice_t device;
    unsigned int id;
    unsigned int profileId;
    nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct {
    unsigned int id;
    unsigned int isP2pSupported;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;

typedef struct {
    unsigned int version;
    unsigned int id;
    unsigned int isP2pSupported;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlGpuInstanceProfileInfo_v2_t;
#define nvmlGpuInstanceProfileInfo_v2 NVML_STRUCT_VERSION(sizeof(nvmlGpuInstanceProfileInfo_v2_t), 2)

typedef struct {
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

typedef struct {
    unsigned int start;
    unsigned int size;
} nvmlComputeInstancePlacement_t;

typedef struct {
    nvmlDevice_t device;
    nvmlGpuInstance_t gpuInstance;
    unsigned int id;
    unsigned int profileId;
    nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

#define NVML_GPU_FABRIC_UUID_LEN 16
#define NVML_GPU_FABRIC_STATE_COMPLETED 3
typedef unsigned char nvmlGpuFabricState_t;

typedef struct {
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
} nvmlGpuFabricInfo_t;

typedef struct {
    unsigned int version;
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
    unsigned int healthMask;
} nvmlGpuFabricInfo_v2_t;
#define nvmlGpuFabricInfo_v2 NVML_STRUCT_VERSION(sizeof(nvmlGpuFabricInfo_v2_t), 2)

typedef struct {
    unsigned int version;
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlComputeInstanceProfileInfo_v2_t;
#define nvmlComputeInstanceProfileInfo_v2 \
    NVML_STRUCT_VERSION(sizeof(nvmlComputeInstanceProfileInfo_v2_t), 2)

/* ----------------------------------------------------------------------- the machine's state */

#define MAX_GPUS 128
#define MAX_PROFILES 16
#define MAX_GI 8
#define MAX_CI 8
#define MAX_FAULTS 64
#define MAX_SETS 16
#define TOTAL_MEMORY_SLICES 8

struct nvmlDevice_st {
    int gpu;  /* parent GPU index */
    int gi;   /* -1 for the GPU itself, else the GPU instance slot of this MIG device */
    int ci;   /* compute instance slot within it */
};

struct profile {
    unsigned constant, id, compute_slices, memory_slices, instance_count;
    unsigned long long memory_mb;
    unsigned starts[8];
    int nstarts;
    /* per instance of this profile: SMs (0: the GPU's share by compute slices) and engines */
    unsigned sms, copy, decoders, encoders, jpegs, ofas;
};

struct nvmlComputeInstance_st {
    int used, gpu, gi;
    unsigned id, profile, slices;
    struct nvmlDevice_st dev;
    char uuid[96];
};

struct nvmlGpuInstance_st {
    int used, gpu, busy;
    unsigned id, profile_id, start, size;
    const struct profile *profile;
    struct nvmlComputeInstance_st ci[MAX_CI];
    char uuid[96]; /* the MIG device UUID of its first compute instance */
};

struct link {
    int state, remote_type;
    char remote[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
};

struct gpu {
    struct nvmlDevice_st dev;
    char uuid[96], name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], bus[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    unsigned pci_device_id, sm_count;
    unsigned long long memory_mib, used_mib;
    int mig_capable, mig_current, mig_pending, reset_needed;
    unsigned util_gpu, util_mem, temperature, power_mw, sm_clock;
    /* telemetry record; -1: "not supported" */
    long long mem_clock, mem_temp, energy_mj, replays, enc, dec, reserved_mib, remap[4];
    int gpm;          /* GPU performance monitoring (Hopper and later) */
    double gpm_values[5]; /* graphics %, any tensor %, DRAM bandwidth %, PCIe TX MiB/s, PCIe RX MiB/s */
    long long ecc[4]; /* sbe volatile, dbe volatile, sbe aggregate, dbe aggregate; -1: no ECC */
    struct link links[NVML_NVLINK_MAX_LINKS];
    struct profile profiles[MAX_PROFILES];
    int nprofiles;
    struct nvmlGpuInstance_st gis[MAX_GI];
    unsigned long long supported_events;
    int cc_major, cc_minor; /* nvmlDeviceGetCudaComputeCapability */
    unsigned minor;         /* nvmlDeviceGetMinorNumber: /dev/nvidia<minor> */
    int fabric;             /* attached to an NVLink fabric (nvmlDeviceGetGpuFabricInfo) */
    unsigned char cluster_uuid[NVML_GPU_FABRIC_UUID_LEN];
    unsigned clique;
};

struct nvmlGpmSample_st {
    int used, taken, gpu, gi; /* gi: the GPU instance slot of a MIG sample, -1 for the whole GPU */
};

struct fault {
    char symbol[64];
    int code, gpu;
};

struct nvmlEventSet_st {
    int used;
    unsigned long long mask[MAX_GPUS];
    long offset; /* how far into the events file this set has read */
    int queued;  /* events from the machine file already delivered */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialised;
static char driver_version[80] = "550.54.15";
static int cuda_version = 12040;
static struct gpu gpus[MAX_GPUS];
static int ngpus;
static unsigned char ancestor[MAX_GPUS][MAX_GPUS];
static struct fault faults[MAX_FAULTS], runtime_faults[MAX_FAULTS];
static int nfaults, nruntime_faults;
static struct stat faults_seen;
static struct nvmlEventSet_st sets[MAX_SETS];
static struct {
    int gpu;
    unsigned long long type, data;
} queued_events[64];
static int nqueued;
static struct nvmlGpmSample_st gpm_samples[MAX_GPM_SAMPLES];

/* ------------------------------------------------------------------ reading the machine file */

static void copy(char *dst, size_t size, const char *src) {
    snprintf(dst, size, "%s", src);
}

static int parse_faults(FILE *f, struct fault *out, int max) {
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < max) {
        struct fault x;
        if (sscanf(line, "fail %63s %d %d", x.symbol, &x.code, &x.gpu) == 3) out[n++] = x;
    }
    return n;
}

static unsigned long long event_type(const char *word) {
    if (!strcmp(word, "xid")) return nvmlEventTypeXidCriticalError;
    if (!strcmp(word, "dbe")) return nvmlEventTypeDoubleBitEccError;
    if (!strcmp(word, "sbe")) return nvmlEventTypeSingleBitEccError;
    return strtoull(word, NULL, 0);
}

/* The compiled machine: one record a line (machine.py writes it; its docstring is the format). */
static nvmlReturn_t load_machine(void) {
    const char *path = getenv("KUBEGPU_NVML_MACHINE");
    if (!path || !*path) return NVML_ERROR_LIBRARY_NOT_FOUND;
    FILE *f = fopen(path, "r");
    if (!f) return NVML_ERROR_LIBRARY_NOT_FOUND;
    memset(gpus, 0, sizeof gpus);
    memset(ancestor, 50, sizeof ancestor);
    ngpus = nfaults = nqueued = 0;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        int g, n = 0;
        if (sscanf(line, "driver %79s", driver_version) == 1) continue;
        if (sscanf(line, "cuda %d", &cuda_version) == 1) continue;
        if (!strncmp(line, "gpu ", 4) && ngpus < MAX_GPUS) {
            struct gpu *x = &gpus[ngpus];
            if (sscanf(line, "gpu %95s %31s %x %llu %llu %u %d %d %d %d %n", x->uuid, x->bus,
                       &x->pci_device_id, &x->memory_mib, &x->used_mib, &x->sm_count, &x->mig_capable,
                       &x->mig_current, &x->mig_pending, &x->reset_needed, &n) >= 10) {
                copy(x->name, sizeof x->name, line + n);
                x->dev.gpu = ngpus;
                x->dev.gi = -1;
                x->minor = (unsigned)ngpus;
                x->supported_events = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError |
                                      nvmlEventTypeSingleBitEccError;
                for (int k = 0; k < 4; k++) x->ecc[k] = -1;
                x->mem_clock = x->mem_temp = x->energy_mj = x->replays = x->enc = x->dec = -1;
                for (int k = 0; k < 4; k++) x->remap[k] = -1;
                ngpus++;
            }
            continue;
        }
        if (!strncmp(line, "sample ", 7)) {
            struct gpu tmp;
            if (sscanf(line, "sample %d %u %u %u %u %u %lld %lld %lld %lld", &g, &tmp.util_gpu,
                       &tmp.util_mem, &tmp.temperature, &tmp.power_mw, &tmp.sm_clock, &tmp.ecc[0],
                       &tmp.ecc[1], &tmp.ecc[2], &tmp.ecc[3]) == 10 && g >= 0 && g < ngpus) {
                struct gpu *x = &gpus[g];
                x->util_gpu = tmp.util_gpu;
                x->util_mem = tmp.util_mem;
                x->temperature = tmp.temperature;
                x->power_mw = tmp.power_mw;
                x->sm_clock = tmp.sm_clock;
                memcpy(x->ecc, tmp.ecc, sizeof x->ecc);
            }
            continue;
        }
        if (!strncmp(line, "nvlink ", 7)) {
            int link, state, type;
            char remote[32];
            if (sscanf(line, "nvlink %d %d %d %31s %d", &g, &link, &state, remote, &type) == 5 && g >= 0 &&
                g < ngpus && link >= 0 && link < NVML_NVLINK_MAX_LINKS) {
                gpus[g].links[link].state = state;
                gpus[g].links[link].remote_type = type;
                copy(gpus[g].links[link].remote, sizeof gpus[g].links[link].remote, remote);
            }
            continue;
        }
        if (!strncmp(line, "ancestor ", 9)) {
            int a, b, level;
            if (sscanf(line, "ancestor %d %d %d", &a, &b, &level) == 3 && a >= 0 && b >= 0 &&
                a < MAX_GPUS && b < MAX_GPUS)
                ancestor[a][b] = ancestor[b][a] = (unsigned char)level;
            continue;
        }
        if (!strncmp(line, "giprofile ", 10)) {
            struct profile p = {0};
            char starts[64];
            if (sscanf(line, "giprofile %d %u %u %u %u %u %llu %63s %u %u %u %u %u %u", &g, &p.constant, &p.id,
                       &p.compute_slices, &p.memory_slices, &p.instance_count, &p.memory_mb, starts, &p.sms,
                       &p.copy, &p.decoders, &p.encoders, &p.jpegs, &p.ofas) >= 8 &&
                g >= 0 && g < ngpus && gpus[g].nprofiles < MAX_PROFILES) {
                for (char *tok = strtok(starts, ","); tok && p.nstarts < 8; tok = strtok(NULL, ","))
                    p.starts[p.nstarts++] = (unsigned)atoi(tok);
                gpus[g].profiles[gpus[g].nprofiles++] = p;
            }
            continue;
        }
        if (!strncmp(line, "gi ", 3)) {
            unsigned id, profile_id, start;
            int busy;
            char uuid[96];
            if (sscanf(line, "gi %d %u %u %u %d %95s", &g, &id, &profile_id, &start, &busy, uuid) == 6 &&
                g >= 0 && g < ngpus) {
                struct gpu *x = &gpus[g];
                for (int s = 0; s < MAX_GI; s++) {
                    struct nvmlGpuInstance_st *gi = &x->gis[s];
                    if (gi->used) continue;
                    const struct profile *p = NULL;
                    for (int k = 0; k < x->nprofiles; k++)
                        if (x->profiles[k].id == profile_id) p = &x->profiles[k];
                    if (!p) break;
                    gi->used = 1;
                    gi->gpu = g;
                    gi->busy = busy;
                    gi->id = id;
                    gi->profile_id = profile_id;
                    gi->profile = p;
                    gi->start = start;
                    gi->size = p->memory_slices;
                    copy(gi->uuid, sizeof gi->uuid, uuid);
                    struct nvmlComputeInstance_st *ci = &gi->ci[0];
                    ci->used = 1;
                    ci->gpu = g;
                    ci->gi = s;
                    ci->id = 0;
                    ci->slices = p->compute_slices;
                    ci->profile = p->compute_slices == 7 ? 4 : p->compute_slices - 1;
                    ci->dev.gpu = g;
                    ci->dev.gi = s;
                    ci->dev.ci = 0;
                    copy(ci->uuid, sizeof ci->uuid, uuid);
                    break;
                }
            }
            continue;
        }
        if (!strncmp(line, "event ", 6) && nqueued < 64) {
            char type[16];
            unsigned long long data;
            if (sscanf(line, "event %d %15s %llu", &g, type, &data) == 3) {
                queued_events[nqueued].gpu = g;
                queued_events[nqueued].type = event_type(type);
                queued_events[nqueued].data = data;
                nqueued++;
            }
            continue;
        }
        if (!strncmp(line, "fail ", 5) && nfaults < MAX_FAULTS) {
            struct fault x;
            if (sscanf(line, "fail %63s %d %d", x.symbol, &x.code, &x.gpu) == 3) faults[nfaults++] = x;
            continue;
        }
        if (!strncmp(line, "cc ", 3)) {
            int major, minor;
            if (sscanf(line, "cc %d %d %d", &g, &major, &minor) == 3 && g >= 0 && g < ngpus) {
                gpus[g].cc_major = major;
                gpus[g].cc_minor = minor;
            }
            continue;
        }
        if (!strncmp(line, "minor ", 6)) {
            unsigned minor;
            if (sscanf(line, "minor %d %u", &g, &minor) == 2 && g >= 0 && g < ngpus) gpus[g].minor = minor;
            continue;
        }
        if (!strncmp(line, "fabric ", 7)) {
            char hex[64];
            unsigned clique;
            if (sscanf(line, "fabric %d %63s %u", &g, hex, &clique) == 3 && g >= 0 && g < ngpus &&
                strlen(hex) == 2 * NVML_GPU_FABRIC_UUID_LEN) {
                for (int k = 0; k < NVML_GPU_FABRIC_UUID_LEN; k++) {
                    unsigned byte = 0;
                    sscanf(hex + 2 * k, "%2x", &byte);
                    gpus[g].cluster_uuid[k] = (unsigned char)byte;
                }
                gpus[g].clique = clique;
                gpus[g].fabric = 1;
            }
            continue;
        }
        if (!strncmp(line, "telemetry ", 10)) {
            long long v[11];
            if (sscanf(line, "telemetry %d %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld", &g, &v[0], &v[1],
                       &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10]) == 12 &&
                g >= 0 && g < ngpus) {
                struct gpu *x = &gpus[g];
                x->mem_clock = v[0];
                x->mem_temp = v[1];
                x->energy_mj = v[2];
                x->replays = v[3];
                x->enc = v[4];
                x->dec = v[5];
                x->reserved_mib = v[6] < 0 ? 0 : v[6];
                for (int k = 0; k < 4; k++) x->remap[k] = v[7 + k];
            }
            continue;
        }
        if (!strncmp(line, "gpm ", 4)) {
            double v[5];
            if (sscanf(line, "gpm %d %lf %lf %lf %lf %lf", &g, &v[0], &v[1], &v[2], &v[3], &v[4]) == 6 && g >= 0 &&
                g < ngpus) {
                gpus[g].gpm = 1;
                memcpy(gpus[g].gpm_values, v, sizeof v);
            }
            continue;
        }
        if (!strncmp(line, "noevents ", 9)) {
            if (sscanf(line, "noevents %d", &g) == 1 && g >= 0 && g < ngpus) gpus[g].supported_events = 0;
            continue;
        }
    }
    fclose(f);
    return NVML_SUCCESS;
}

static void reload_runtime_faults(void) {
    const char *path = getenv("KUBEGPU_NVML_FAULTS");
    struct stat st;
    if (!path || !*path || stat(path, &st) != 0) {
        nruntime_faults = 0;
        return;
    }
    if (st.st_mtim.tv_sec == faults_seen.st_mtim.tv_sec && st.st_mtim.tv_nsec == faults_seen.st_mtim.tv_nsec &&
        st.st_size == faults_seen.st_size)
        return;
    faults_seen = st;
    FILE *f = fopen(path, "r");
    if (!f) return;
    nruntime_faults = parse_faults(f, runtime_faults, MAX_FAULTS);
    fclose(f);
}

/* The injected failure of `symbol` on GPU `gpu` (-1: a call of no GPU), or NVML_SUCCESS. */
static nvmlReturn_t injected(const char *symbol, int gpu) {
    reload_runtime_faults();
    for (int pass = 0; pass < 2; pass++) {
        const struct fault *list = pass ? runtime_faults : faults;
        int n = pass ? nruntime_faults : nfaults;
        for (int i = 0; i < n; i++)
            if (!strcmp(list[i].symbol, symbol) && (list[i].gpu < 0 || list[i].gpu == gpu)) return list[i].code;
    }
    return NVML_SUCCESS;
}

#define ENTER(symbol, gpu)                                            \
    do {                                                              \
        if (!initialised) return NVML_ERROR_UNINITIALIZED;            \
        nvmlReturn_t injected_ = injected(symbol, gpu);               \
        if (injected_ != NVML_SUCCESS) return injected_;              \
    } while (0)

static int gpu_of(nvmlDevice_t device) {
    if (!device) return -1;
    for (int i = 0; i < ngpus; i++)
        if (device == &gpus[i].dev) return i;
    for (int i = 0; i < ngpus; i++)
        for (int s = 0; s < MAX_GI; s++)
            for (int c = 0; c < MAX_CI; c++)
                if (device == &gpus[i].gis[s].ci[c].dev && gpus[i].gis[s].ci[c].used) return i;
    return -1;
}

#define DEVICE(symbol, device, g)                          \
    int g = gpu_of(device);                                \
    if (!initialised) return NVML_ERROR_UNINITIALIZED;     \
    if (g < 0) return NVML_ERROR_INVALID_ARGUMENT;         \
    ENTER(symbol, g)

static int is_mig(nvmlDevice_t device) {
    return device && device->gi >= 0;
}

/* ------------------------------------------------------------------------------ the library */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = NVML_SUCCESS;
    if (!initialised) {
        rc = load_machine();
        if (rc == NVML_SUCCESS) {
            nvmlReturn_t fail = injected("nvmlInitWithFlags", -1);
            if (fail == NVML_SUCCESS) fail = injected("nvmlInit", -1);
            rc = fail;
        }
    }
    if (rc == NVML_SUCCESS) initialised++;
    pthread_mutex_unlock(&lock);
    return rc;
}

nvmlReturn_t nvmlInit_v2(void) {
    return nvmlInitWithFlags(0);
}

nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = initialised ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (initialised) initialised--;
    pthread_mutex_unlock(&lock);
    return rc;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires reset";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Version mismatch between argument and library";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    ENTER("nvmlSystemGetDriverVersion", -1);
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(driver_version) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    copy(version, length, driver_version);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    ENTER("nvmlSystemGetCudaDriverVersion_v2", -1);
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    *version = cuda_version;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    return nvmlSystemGetCudaDriverVersion_v2(version);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    ENTER("nvmlDeviceGetCount_v2", -1);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned)ngpus;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    ENTER("nvmlDeviceGetHandleByIndex_v2", (int)index);
    if (!device || index >= (unsigned)ngpus) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &gpus[index].dev;
    return NVML_SUCCESS;
}

static void pci_info(const char *bus, unsigned device_id, nvmlPciInfo_t *pci) {
    memset(pci, 0, sizeof *pci);
    copy(pci->busId, sizeof pci->busId, bus);
    unsigned domain = 0, b = 0, d = 0, fn = 0;
    sscanf(bus, "%x:%x:%x.%x", &domain, &b, &d, &fn);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04x:%02x:%02x.%x", domain & 0xffff, b, d, fn);
    pci->domain = domain;
    pci->bus = b;
    pci->device = d;
    pci->pciDeviceId = device_id;
    pci->pciSubSystemId = 0x16c110de;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    DEVICE("nvmlDeviceGetPciInfo_v3", device, g);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    pci_info(gpus[g].bus, gpus[g].pci_device_id, pci);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    DEVICE("nvmlDeviceGetName", device, g);
    if (!name) return NVML_ERROR_INVALID_ARGUMENT;
    char mig_name[NVML_DEVICE_NAME_V2_BUFFER_SIZE + 32];
    const char *value = gpus[g].name;
    if (is_mig(device)) {
        const struct nvmlGpuInstance_st *gi = &gpus[g].gis[device->gi];
        snprintf(mig_name, sizeof mig_name, "%s MIG %ug.%llugb", gpus[g].name, gi->profile->compute_slices,
                 (gi->profile->memory_mb + 512) / 1024);
        value = mig_name;
    }
    if (strlen(value) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    copy(name, length, value);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    DEVICE("nvmlDeviceGetUUID", device, g);
    if (!uuid) return NVML_ERROR_INVALID_ARGUMENT;
    const char *value = is_mig(device) ? gpus[g].gis[device->gi].ci[device->ci].uuid : gpus[g].uuid;
    if (strlen(value) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    copy(uuid, length, value);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    DEVICE("nvmlDeviceGetMemoryInfo", device, g);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    const unsigned long long mib = 1ULL << 20;
    if (is_mig(device)) {
        memory->total = gpus[g].gis[device->gi].profile->memory_mb * mib;
        memory->used = 0;
    } else {
        memory->total = gpus[g].memory_mib * mib;
        memory->used = (gpus[g].used_mib + (unsigned long long)gpus[g].reserved_mib) * mib; /* v1: reserved is used */
    }
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

/* v2 reports the driver's reserved framebuffer apart: used + reserved + free = total. */
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    DEVICE("nvmlDeviceGetMemoryInfo_v2", device, g);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const unsigned long long mib = 1ULL << 20;
    if (is_mig(device)) {
        memory->total = gpus[g].gis[device->gi].profile->memory_mb * mib;
        memory->reserved = 0;
        memory->used = 0;
    } else {
        memory->total = gpus[g].memory_mib * mib;
        memory->reserved = (unsigned long long)gpus[g].reserved_mib * mib;
        memory->used = gpus[g].used_mib * mib;
    }
    memory->free = memory->total - memory->reserved - memory->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    DEVICE("nvmlDeviceGetUtilizationRates", device, g);
    if (!utilization) return NVML_ERROR_INVALID_ARGUMENT;
    if (is_mig(device) || gpus[g].mig_current) return NVML_ERROR_NOT_SUPPORTED;
    utilization->gpu = gpus[g].util_gpu;
    utilization->memory = gpus[g].util_mem;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, unsigned int sensor, unsigned int *temp) {
    DEVICE("nvmlDeviceGetTemperature", device, g);
    if (!temp || sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = gpus[g].temperature;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    DEVICE("nvmlDeviceGetPowerUsage", device, g);
    if (!power) return NVML_ERROR_INVALID_ARGUMENT;
    *power = gpus[g].power_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, unsigned int type, unsigned int *clock) {
    DEVICE("nvmlDeviceGetClockInfo", device, g);
    if (!clock || type > 3) return NVML_ERROR_INVALID_ARGUMENT;
    if (type == NVML_CLOCK_MEM) {
        if (gpus[g].mem_clock < 0) return NVML_ERROR_NOT_SUPPORTED;
        *clock = (unsigned)gpus[g].mem_clock;
        return NVML_SUCCESS;
    }
    *clock = type == NVML_CLOCK_SM ? gpus[g].sm_clock : 0;
    return NVML_SUCCESS;
}

/* Device telemetry NVML answers for a whole GPU; a MIG device handle gets "not supported". */
static nvmlReturn_t whole_gpu_value(nvmlDevice_t device, long long value) {
    if (is_mig(device) || value < 0) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy) {
    DEVICE("nvmlDeviceGetTotalEnergyConsumption", device, g);
    if (!energy) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = whole_gpu_value(device, gpus[g].energy_mj);
    if (rc == NVML_SUCCESS) *energy = (unsigned long long)gpus[g].energy_mj;
    return rc;
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value) {
    DEVICE("nvmlDeviceGetPcieReplayCounter", device, g);
    if (!value) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = whole_gpu_value(device, gpus[g].replays);
    if (rc == NVML_SUCCESS) *value = (unsigned)gpus[g].replays;
    return rc;
}

static nvmlReturn_t engine_utilization(nvmlDevice_t device, long long value, unsigned int *util,
                                       unsigned int *period_us) {
    if (!util || !period_us) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = whole_gpu_value(device, value);
    if (rc != NVML_SUCCESS) return rc;
    *util = (unsigned)value;
    *period_us = 167000;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *util, unsigned int *period_us) {
    DEVICE("nvmlDeviceGetEncoderUtilization", device, g);
    return engine_utilization(device, gpus[g].enc, util, period_us);
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *util, unsigned int *period_us) {
    DEVICE("nvmlDeviceGetDecoderUtilization", device, g);
    return engine_utilization(device, gpus[g].dec, util, period_us);
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corr, unsigned int *unc,
                                       unsigned int *pending, unsigned int *failure) {
    DEVICE("nvmlDeviceGetRemappedRows", device, g);
    if (!corr || !unc || !pending || !failure) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = whole_gpu_value(device, gpus[g].remap[0]);
    if (rc != NVML_SUCCESS) return rc;
    *corr = (unsigned)gpus[g].remap[0];
    *unc = (unsigned)gpus[g].remap[1];
    *pending = (unsigned)gpus[g].remap[2];
    *failure = (unsigned)gpus[g].remap[3];
    return NVML_SUCCESS;
}

/* Field values: the one field kubegpu reads (the HBM temperature); any other is "not supported" in
 * its own nvmlReturn, and the call itself succeeds, as nvml.h documents. */
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count, nvmlFieldValue_t *values) {
    DEVICE("nvmlDeviceGetFieldValues", device, g);
    if (!values || count < 0) return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = (long long)now.tv_sec * 1000000 + now.tv_nsec / 1000;
        v->latencyUsec = 0;
        v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        if (v->fieldId == NVML_FI_DEV_MEMORY_TEMP && whole_gpu_value(device, gpus[g].mem_temp) == NVML_SUCCESS) {
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
            v->value.ullVal = 0;
            v->value.uiVal = (unsigned)gpus[g].mem_temp;
            v->nvmlReturn = NVML_SUCCESS;
        }
    }
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------ GPU performance monitoring */

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *support) {
    DEVICE("nvmlGpmQueryDeviceSupport", device, g);
    if (!support) return NVML_ERROR_INVALID_ARGUMENT;
    if (support->version != NVML_GPM_SUPPORT_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    support->isSupportedDevice = (unsigned)gpus[g].gpm;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    ENTER("nvmlGpmSampleAlloc", -1);
    if (!sample) return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = NVML_ERROR_MEMORY;
    for (int i = 0; i < MAX_GPM_SAMPLES; i++)
        if (!gpm_samples[i].used) {
            gpm_samples[i] = (struct nvmlGpmSample_st){.used = 1, .gpu = -1, .gi = -1};
            *sample = &gpm_samples[i];
            rc = NVML_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&lock);
    return rc;
}

static int gpm_sample_valid(nvmlGpmSample_t sample) {
    return sample && sample >= gpm_samples && sample < gpm_samples + MAX_GPM_SAMPLES && sample->used;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    ENTER("nvmlGpmSampleFree", -1);
    if (!gpm_sample_valid(sample)) return NVML_ERROR_INVALID_ARGUMENT;
    sample->used = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
    DEVICE("nvmlGpmSampleGet", device, g);
    if (!gpm_sample_valid(sample) || is_mig(device)) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpus[g].gpm) return NVML_ERROR_NOT_SUPPORTED;
    sample->gpu = g;
    sample->gi = -1;
    sample->taken = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpu_instance_id, nvmlGpmSample_t sample) {
    DEVICE("nvmlGpmMigSampleGet", device, g);
    if (!gpm_sample_valid(sample) || is_mig(device)) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpus[g].gpm) return NVML_ERROR_NOT_SUPPORTED;
    for (int s = 0; s < MAX_GI; s++)
        if (gpus[g].gis[s].used && gpus[g].gis[s].id == gpu_instance_id) {
            sample->gpu = g;
            sample->gi = s;
            sample->taken = 1;
            return NVML_SUCCESS;
        }
    return NVML_ERROR_INVALID_ARGUMENT; /* no GPU instance of that id */
}

/* The machine's figures for every interval: a whole GPU's as described; a GPU instance's activity is
 * the GPU's while the instance is busy and 0 while idle, and PCIe traffic is the GPU's alone
 * (its metrics answer "not supported" for an instance). */
nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *request) {
    ENTER("nvmlGpmMetricsGet", -1);
    if (!request) return NVML_ERROR_INVALID_ARGUMENT;
    if (request->version != NVML_GPM_METRICS_GET_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlGpmSample_t a = request->sample1, b = request->sample2;
    if (!gpm_sample_valid(a) || !gpm_sample_valid(b) || !a->taken || !b->taken || a->gpu != b->gpu ||
        a->gi != b->gi || a->gpu < 0 || a->gpu >= ngpus)
        return NVML_ERROR_INVALID_ARGUMENT;
    const struct gpu *x = &gpus[a->gpu];
    static char *names[5][3] = {{"gr_util", "graphics utilization", "%"},
                                {"any_tensor_util", "any tensor utilization", "%"},
                                {"dram_bw_util", "DRAM bandwidth utilization", "%"},
                                {"pcie_tx", "PCIe TX", "MiB/sec"},
                                {"pcie_rx", "PCIe RX", "MiB/sec"}};
    static const unsigned ids[5] = {1, 5, 10, 20, 21}; /* NVML_GPM_METRIC_* */
    for (unsigned i = 0; i < request->numMetrics; i++) {
        nvmlGpmMetric_t *m = &request->metrics[i];
        m->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        m->value = 0;
        m->metricInfo = (nvmlGpmMetricInfo_t){0};
        for (int k = 0; k < 5; k++) {
            if (m->metricId != ids[k]) continue;
            if (a->gi >= 0 && k >= 3) break;
            m->value = a->gi >= 0 && !x->gis[a->gi].busy ? 0.0 : x->gpm_values[k];
            m->metricInfo = (nvmlGpmMetricInfo_t){names[k][0], names[k][1], names[k][2]};
            m->nvmlReturn = NVML_SUCCESS;
        }
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, unsigned int error_type, unsigned int counter_type,
                                         unsigned long long *count) {
    DEVICE("nvmlDeviceGetTotalEccErrors", device, g);
    if (!count || error_type > 1 || counter_type > 1) return NVML_ERROR_INVALID_ARGUMENT;
    long long value = gpus[g].ecc[counter_type * 2 + error_type];
    if (value < 0) return NVML_ERROR_NOT_SUPPORTED;
    *count = (unsigned long long)value;
    return NVML_SUCCESS;
}

/* --------------------------------------------------------------------------- topology */

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b, unsigned int *level) {
    int i = gpu_of(a), j = gpu_of(b);
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (i < 0 || j < 0 || !level || is_mig(a) || is_mig(b)) return NVML_ERROR_INVALID_ARGUMENT;
    ENTER("nvmlDeviceGetTopologyCommonAncestor", i);
    *level = i == j ? 0 : ancestor[i][j];
    return NVML_SUCCESS;
}

static nvmlReturn_t nvlink(nvmlDevice_t device, unsigned int link, const char *symbol, struct link **out) {
    DEVICE(symbol, device, g);
    if (is_mig(device)) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= NVML_NVLINK_MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
    struct link *l = &gpus[g].links[link];
    if (!l->remote[0]) return NVML_ERROR_NOT_SUPPORTED; /* no such link on this board */
    *out = l;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, unsigned int *active) {
    struct link *l;
    nvmlReturn_t rc = nvlink(device, link, "nvmlDeviceGetNvLinkState", &l);
    if (rc != NVML_SUCCESS) return rc;
    if (!active) return NVML_ERROR_INVALID_ARGUMENT;
    *active = (unsigned)l->state;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci) {
    struct link *l;
    nvmlReturn_t rc = nvlink(device, link, "nvmlDeviceGetNvLinkRemotePciInfo_v2", &l);
    if (rc != NVML_SUCCESS) return rc;
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    pci_info(l->remote, 0, pci);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link, unsigned int *type) {
    struct link *l;
    nvmlReturn_t rc = nvlink(device, link, "nvmlDeviceGetNvLinkRemoteDeviceType", &l);
    if (rc != NVML_SUCCESS) return rc;
    if (!type) return NVML_ERROR_INVALID_ARGUMENT;
    *type = (unsigned)l->remote_type;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------------ health events */

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    ENTER("nvmlEventSetCreate", -1);
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_SETS; i++) {
        if (sets[i].used) continue;
        memset(&sets[i], 0, sizeof sets[i]);
        sets[i].used = 1;
        /* a new set sees only events appended from now on */
        const char *path = getenv("KUBEGPU_NVML_EVENTS");
        struct stat st;
        if (path && *path && stat(path, &st) == 0) sets[i].offset = st.st_size;
        *set = &sets[i];
        pthread_mutex_unlock(&lock);
        return NVML_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return NVML_ERROR_INSUFFICIENT_RESOURCES;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    ENTER("nvmlEventSetFree", -1);
    if (!set || !set->used) return NVML_ERROR_INVALID_ARGUMENT;
    set->used = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *types) {
    DEVICE("nvmlDeviceGetSupportedEventTypes", device, g);
    if (!types) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpus[g].supported_events) return NVML_ERROR_NOT_SUPPORTED;
    *types = gpus[g].supported_events;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set) {
    DEVICE("nvmlDeviceRegisterEvents", device, g);
    if (!set || !set->used) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpus[g].supported_events) return NVML_ERROR_NOT_SUPPORTED;
    if (types & ~gpus[g].supported_events) return NVML_ERROR_NOT_SUPPORTED;
    set->mask[g] |= types;
    return NVML_SUCCESS;
}

/* The next event for `set` from the events file, if one was appended since it last looked. */
static int next_file_event(nvmlEventSet_t set, nvmlEventData_t *data) {
    const char *path = getenv("KUBEGPU_NVML_EVENTS");
    if (!path || !*path) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int found = 0;
    if (fseek(f, set->offset, SEEK_SET) == 0) {
        char line[256];
        while (!found && fgets(line, sizeof line, f)) {
            if (!strchr(line, '\n')) break; /* a line still being written */
            set->offset = ftell(f);
            int g;
            char type[16];
            unsigned long long value;
            if (sscanf(line, "event %d %15s %llu", &g, type, &value) != 3 || g < 0 || g >= ngpus) continue;
            unsigned long long t = event_type(type);
            if (!(set->mask[g] & t)) continue;
            memset(data, 0, sizeof *data);
            data->device = &gpus[g].dev;
            data->eventType = t;
            data->eventData = value;
            data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFF;
            found = 1;
        }
    }
    fclose(f);
    return found;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout_ms) {
    ENTER("nvmlEventSetWait_v2", -1);
    if (!set || !set->used || !data) return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec start, now, nap = {0, 10 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        while (set->queued < nqueued) {
            int k = set->queued++;
            int g = queued_events[k].gpu;
            if (g < 0 || g >= ngpus || !(set->mask[g] & queued_events[k].type)) continue;
            memset(data, 0, sizeof *data);
            data->device = &gpus[g].dev;
            data->eventType = queued_events[k].type;
            data->eventData = queued_events[k].data;
            data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFF;
            return NVML_SUCCESS;
        }
        if (next_file_event(set, data)) return NVML_SUCCESS;
        nvmlReturn_t later = injected("nvmlEventSetWait_v2", -1);
        if (later != NVML_SUCCESS) return later;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long elapsed_ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (elapsed_ms >= (long)timeout_ms) return NVML_ERROR_TIMEOUT;
        nanosleep(&nap, NULL);
    }
}

/* ------------------------------------------------------------------------------------ MIG */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending) {
    DEVICE("nvmlDeviceGetMigMode", device, g);
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    if (is_mig(device) || !gpus[g].mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    *current = (unsigned)gpus[g].mig_current;
    *pending = (unsigned)gpus[g].mig_pending;
    return NVML_SUCCESS;
}

static int instance_count(const struct gpu *x) {
    int n = 0;
    for (int s = 0; s < MAX_GI; s++) n += x->gis[s].used;
    return n;
}

nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activation) {
    DEVICE("nvmlDeviceSetMigMode", device, g);
    if (!activation || mode > 1) return NVML_ERROR_INVALID_ARGUMENT;
    struct gpu *x = &gpus[g];
    if (is_mig(device) || !x->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    if (instance_count(x)) return NVML_ERROR_IN_USE;
    x->mig_pending = (int)mode;
    if (x->reset_needed && x->mig_current != (int)mode) {
        *activation = NVML_ERROR_RESET_REQUIRED;
    } else {
        x->mig_current = (int)mode;
        *activation = NVML_SUCCESS;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    DEVICE("nvmlDeviceGetMaxMigDeviceCount", device, g);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    /* nvml.h: "Returns zero if MIG is not supported or enabled." */
    *count = gpus[g].mig_capable && gpus[g].mig_current && !is_mig(device) ? 7 : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *mig) {
    DEVICE("nvmlDeviceGetMigDeviceHandleByIndex", device, g);
    if (!mig || is_mig(device)) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpus[g].mig_current) return NVML_ERROR_NOT_SUPPORTED;
    unsigned k = 0;
    for (int s = 0; s < MAX_GI; s++)
        for (int c = 0; c < MAX_CI; c++) {
            struct nvmlComputeInstance_st *ci = &gpus[g].gis[s].ci[c];
            if (!gpus[g].gis[s].used || !ci->used) continue;
            if (k++ == index) {
                *mig = &ci->dev;
                return NVML_SUCCESS;
            }
        }
    return NVML_ERROR_NOT_FOUND;
}

/* An instance's SMs: the machine's figure for its profile, else the GPU's share by compute slices. */
static unsigned profile_sms(const struct gpu *x, const struct profile *p) {
    return p->sms ? p->sms : x->sm_count * p->compute_slices / 7;
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes) {
    DEVICE("nvmlDeviceGetAttributes_v2", device, g);
    if (!attributes) return NVML_ERROR_INVALID_ARGUMENT;
    memset(attributes, 0, sizeof *attributes);
    const struct gpu *x = &gpus[g];
    if (is_mig(device)) {
        const struct nvmlGpuInstance_st *gi = &x->gis[device->gi];
        const struct profile *p = gi->profile;
        attributes->gpuInstanceSliceCount = p->compute_slices;
        attributes->computeInstanceSliceCount = gi->ci[device->ci].slices;
        attributes->multiprocessorCount = profile_sms(x, p) * gi->ci[device->ci].slices / p->compute_slices;
        attributes->memorySizeMB = p->memory_mb;
        attributes->sharedCopyEngineCount = p->copy ? p->copy : 1;
        attributes->sharedDecoderCount = p->decoders;
        attributes->sharedEncoderCount = p->encoders;
        attributes->sharedJpegCount = p->jpegs;
        attributes->sharedOfaCount = p->ofas;
    } else {
        attributes->gpuInstanceSliceCount = x->mig_capable ? 7 : 0;
        attributes->computeInstanceSliceCount = attributes->gpuInstanceSliceCount;
        attributes->multiprocessorCount = x->sm_count;
        attributes->memorySizeMB = x->memory_mib;
        attributes->sharedCopyEngineCount = 1;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    DEVICE("nvmlDeviceGetGpuInstanceId", device, g);
    if (!id) return NVML_ERROR_INVALID_ARGUMENT;
    if (!is_mig(device)) return NVML_ERROR_INVALID_ARGUMENT;
    *id = gpus[g].gis[device->gi].id;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    DEVICE("nvmlDeviceGetComputeInstanceId", device, g);
    if (!id || !is_mig(device)) return NVML_ERROR_INVALID_ARGUMENT;
    *id = gpus[g].gis[device->gi].ci[device->ci].id;
    return NVML_SUCCESS;
}

static const struct profile *profile_by(const struct gpu *x, unsigned key, int by_constant) {
    for (int k = 0; k < x->nprofiles; k++)
        if ((by_constant ? x->profiles[k].constant : x->profiles[k].id) == key) return &x->profiles[k];
    return NULL;
}

static void fill_profile_v1(const struct profile *p, const struct gpu *x, nvmlGpuInstanceProfileInfo_t *info) {
    memset(info, 0, sizeof *info);
    info->id = p->id;
    info->sliceCount = p->compute_slices;
    info->instanceCount = p->instance_count;
    info->multiprocessorCount = profile_sms(x, p);
    info->copyEngineCount = p->copy ? p->copy : 1;
    info->decoderCount = p->decoders;
    info->encoderCount = p->encoders;
    info->jpegCount = p->jpegs;
    info->ofaCount = p->ofas;
    info->memorySizeMB = p->memory_mb;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t *info) {
    DEVICE("nvmlDeviceGetGpuInstanceProfileInfo", device, g);
    if (!info || is_mig(device)) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpus[g].mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    const struct profile *p = profile_by(&gpus[g], profile, 1);
    if (!p) return NVML_ERROR_NOT_SUPPORTED;
    fill_profile_v1(p, &gpus[g], info);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info) {
    DEVICE("nvmlDeviceGetGpuInstanceProfileInfoV", device, g);
    if (!info || is_mig(device)) return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlGpuInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (!gpus[g].mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    const struct profile *p = profile_by(&gpus[g], profile, 1);
    if (!p) return NVML_ERROR_NOT_SUPPORTED;
    nvmlGpuInstanceProfileInfo_t v1;
    fill_profile_v1(p, &gpus[g], &v1);
    unsigned version = info->version;
    memset(info, 0, sizeof *info);
    info->version = version;
    info->id = v1.id;
    info->sliceCount = v1.sliceCount;
    info->instanceCount = v1.instanceCount;
    info->multiprocessorCount = v1.multiprocessorCount;
    info->copyEngineCount = v1.copyEngineCount;
    info->decoderCount = v1.decoderCount;
    info->encoderCount = v1.encoderCount;
    info->jpegCount = v1.jpegCount;
    info->ofaCount = v1.ofaCount;
    info->memorySizeMB = v1.memorySizeMB;
    snprintf(info->name, sizeof info->name, "MIG %ug.%llugb", p->compute_slices, (p->memory_mb + 512) / 1024);
    return NVML_SUCCESS;
}

static int starts_at(const struct profile *p, unsigned start) {
    for (int k = 0; k < p->nstarts; k++)
        if (p->starts[k] == start) return 1;
    return 0;
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profile_id,
                                                      const nvmlGpuInstancePlacement_t *placement,
                                                      nvmlGpuInstance_t *out) {
    DEVICE("nvmlDeviceCreateGpuInstanceWithPlacement", device, g);
    if (!placement || !out || is_mig(device)) return NVML_ERROR_INVALID_ARGUMENT;
    struct gpu *x = &gpus[g];
    if (!x->mig_capable || !x->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    const struct profile *p = profile_by(x, profile_id, 0);
    if (!p) return NVML_ERROR_INVALID_ARGUMENT;
    if (!starts_at(p, placement->start) || placement->size != p->memory_slices ||
        placement->start + placement->size > TOTAL_MEMORY_SLICES)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned same = 0, used_ids = 0;
    for (int s = 0; s < MAX_GI; s++) {
        const struct nvmlGpuInstance_st *gi = &x->gis[s];
        if (!gi->used) continue;
        used_ids |= 1U << gi->id;
        if (gi->profile_id == profile_id) same++;
        if (placement->start < gi->start + gi->size && gi->start < placement->start + placement->size)
            return NVML_ERROR_INSUFFICIENT_RESOURCES;
    }
    if (same >= p->instance_count) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    for (int s = 0; s < MAX_GI; s++) {
        struct nvmlGpuInstance_st *gi = &x->gis[s];
        if (gi->used) continue;
        memset(gi, 0, sizeof *gi);
        gi->used = 1;
        gi->gpu = g;
        gi->profile = p;
        gi->profile_id = profile_id;
        gi->start = placement->start;
        gi->size = placement->size;
        unsigned id = 1;
        while (used_ids & (1U << id)) id++;
        gi->id = id;
        *out = gi;
        return NVML_SUCCESS;
    }
    return NVML_ERROR_INSUFFICIENT_RESOURCES;
}

static int gi_valid(nvmlGpuInstance_t gi) {
    for (int i = 0; i < ngpus; i++)
        for (int s = 0; s < MAX_GI; s++)
            if (gi == &gpus[i].gis[s]) return gi->used;
    return 0;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gi, nvmlGpuInstanceInfo_t *info) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!gi_valid(gi) || !info) return NVML_ERROR_INVALID_ARGUMENT;
    ENTER("nvmlGpuInstanceGetInfo", gi->gpu);
    info->device = &gpus[gi->gpu].dev;
    info->id = gi->id;
    info->profileId = gi->profile_id;
    info->placement.start = gi->start;
    info->placement.size = gi->size;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *out) {
    DEVICE("nvmlDeviceGetGpuInstanceById", device, g);
    if (!out || is_mig(device)) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpus[g].mig_current) return NVML_ERROR_NOT_SUPPORTED;
    for (int s = 0; s < MAX_GI; s++)
        if (gpus[g].gis[s].used && gpus[g].gis[s].id == id) {
            *out = &gpus[g].gis[s];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profile_id, nvmlGpuInstance_t *list,
                                       unsigned int *count) {
    DEVICE("nvmlDeviceGetGpuInstances", device, g);
    if (!list || !count || is_mig(device)) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpus[g].mig_current) return NVML_ERROR_NOT_SUPPORTED;
    if (!profile_by(&gpus[g], profile_id, 0)) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (int s = 0; s < MAX_GI; s++)
        if (gpus[g].gis[s].used && gpus[g].gis[s].profile_id == profile_id) list[n++] = &gpus[g].gis[s];
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gi) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!gi_valid(gi)) return NVML_ERROR_INVALID_ARGUMENT;
    ENTER("nvmlGpuInstanceDestroy", gi->gpu);
    if (gi->busy) return NVML_ERROR_IN_USE;
    for (int c = 0; c < MAX_CI; c++)
        if (gi->ci[c].used) return NVML_ERROR_IN_USE;
    gi->used = 0;
    return NVML_SUCCESS;
}

/* Compute-instance profiles: NVML_COMPUTE_INSTANCE_PROFILE_{1,2,3,4,7}_SLICE = 0x0..0x4. */
static int ci_slices(unsigned profile) {
    static const int slices[] = {1, 2, 3, 4, 7};
    return profile < 5 ? slices[profile] : -1;
}

/* A compute-instance profile of `gi` (NVML_COMPUTE_INSTANCE_PROFILE_* constant), or an NVML error. */
static nvmlReturn_t ci_profile(nvmlGpuInstance_t gi, unsigned int profile, unsigned int eng_profile,
                               nvmlComputeInstanceProfileInfo_t *info) {
    int slices = ci_slices(profile);
    if (eng_profile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED || slices < 0 ||
        (unsigned)slices > gi->profile->compute_slices)
        return NVML_ERROR_NOT_SUPPORTED;
    const struct profile *p = gi->profile;
    memset(info, 0, sizeof *info);
    info->id = profile;
    info->sliceCount = (unsigned)slices;
    info->instanceCount = p->compute_slices / (unsigned)slices;
    info->multiprocessorCount = profile_sms(&gpus[gi->gpu], p) * (unsigned)slices / p->compute_slices;
    info->sharedCopyEngineCount = p->copy ? p->copy : 1;
    info->sharedDecoderCount = p->decoders;
    info->sharedEncoderCount = p->encoders;
    info->sharedJpegCount = p->jpegs;
    info->sharedOfaCount = p->ofas;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gi, unsigned int profile,
                                                          unsigned int eng_profile,
                                                          nvmlComputeInstanceProfileInfo_t *info) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!gi_valid(gi) || !info) return NVML_ERROR_INVALID_ARGUMENT;
    ENTER("nvmlGpuInstanceGetComputeInstanceProfileInfo", gi->gpu);
    return ci_profile(gi, profile, eng_profile, info);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gi, unsigned int profile,
                                                           unsigned int eng_profile,
                                                           nvmlComputeInstanceProfileInfo_v2_t *info) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!gi_valid(gi) || !info) return NVML_ERROR_INVALID_ARGUMENT;
    ENTER("nvmlGpuInstanceGetComputeInstanceProfileInfoV", gi->gpu);
    if (info->version != nvmlComputeInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlComputeInstanceProfileInfo_t v1;
    nvmlReturn_t rc = ci_profile(gi, profile, eng_profile, &v1);
    if (rc != NVML_SUCCESS) return rc;
    unsigned version = info->version;
    memset(info, 0, sizeof *info);
    info->version = version;
    info->id = v1.id;
    info->sliceCount = v1.sliceCount;
    info->instanceCount = v1.instanceCount;
    info->multiprocessorCount = v1.multiprocessorCount;
    info->sharedCopyEngineCount = v1.sharedCopyEngineCount;
    info->sharedDecoderCount = v1.sharedDecoderCount;
    info->sharedEncoderCount = v1.sharedEncoderCount;
    info->sharedJpegCount = v1.sharedJpegCount;
    info->sharedOfaCount = v1.sharedOfaCount;
    snprintf(info->name, sizeof info->name, "MIG %uc.%ug.%llugb", v1.sliceCount, gi->profile->compute_slices,
             (gi->profile->memory_mb + 512) / 1024);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gi, unsigned int profile,
                                                  nvmlComputeInstance_t *out) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!gi_valid(gi) || !out) return NVML_ERROR_INVALID_ARGUMENT;
    ENTER("nvmlGpuInstanceCreateComputeInstance", gi->gpu);
    int slices = ci_slices(profile);
    if (slices < 0 || (unsigned)slices > gi->profile->compute_slices) return NVML_ERROR_NOT_SUPPORTED;
    unsigned taken = 0;
    for (int c = 0; c < MAX_CI; c++)
        if (gi->ci[c].used) taken += gi->ci[c].slices;
    if (taken + (unsigned)slices > gi->profile->compute_slices) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    int slot = (int)(gi - gpus[gi->gpu].gis);
    for (int c = 0; c < MAX_CI; c++) {
        struct nvmlComputeInstance_st *ci = &gi->ci[c];
        if (ci->used) continue;
        memset(ci, 0, sizeof *ci);
        ci->used = 1;
        ci->gpu = gi->gpu;
        ci->gi = slot;
        ci->id = (unsigned)c;
        ci->profile = profile;
        ci->slices = (unsigned)slices;
        ci->dev.gpu = gi->gpu;
        ci->dev.gi = slot;
        ci->dev.ci = c;
        /* MIG device UUIDs: MIG-<8-4-4-4-12>, stable for the GPU, the instance and its slot */
        unsigned long h = 5381;
        for (const char *p = gpus[gi->gpu].uuid; *p; p++) h = h * 33 + (unsigned char)*p;
        h = h * 33 + gi->id * 131 + gi->start * 7 + (unsigned)c;
        snprintf(ci->uuid, sizeof ci->uuid, "MIG-%08lx-%04lx-%04lx-%04lx-%012lx", h & 0xffffffffUL,
                 (h >> 8) & 0xffff, (h >> 16) & 0xffff, (h >> 24) & 0xffff, (h * 2654435761UL) & 0xffffffffffffUL);
        *out = ci;
        return NVML_SUCCESS;
    }
    return NVML_ERROR_INSUFFICIENT_RESOURCES;
}

static int ci_valid(nvmlComputeInstance_t ci) {
    for (int i = 0; i < ngpus; i++)
        for (int s = 0; s < MAX_GI; s++)
            for (int c = 0; c < MAX_CI; c++)
                if (ci == &gpus[i].gis[s].ci[c]) return ci->used;
    return 0;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gi, unsigned int profile,
                                                nvmlComputeInstance_t *list, unsigned int *count) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!gi_valid(gi) || !list || !count) return NVML_ERROR_INVALID_ARGUMENT;
    ENTER("nvmlGpuInstanceGetComputeInstances", gi->gpu);
    int slices = ci_slices(profile);
    if (slices < 0) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (int c = 0; c < MAX_CI; c++)
        if (gi->ci[c].used && gi->ci[c].slices == (unsigned)slices) list[n++] = &gi->ci[c];
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t ci) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!ci_valid(ci)) return NVML_ERROR_INVALID_ARGUMENT;
    ENTER("nvmlComputeInstanceDestroy", ci->gpu);
    if (gpus[ci->gpu].gis[ci->gi].busy) return NVML_ERROR_IN_USE;
    ci->used = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gi, unsigned int id,
                                                   nvmlComputeInstance_t *out) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!gi_valid(gi) || !out) return NVML_ERROR_INVALID_ARGUMENT;
    ENTER("nvmlGpuInstanceGetComputeInstanceById", gi->gpu);
    for (int c = 0; c < MAX_CI; c++)
        if (gi->ci[c].used && gi->ci[c].id == id) {
            *out = &gi->ci[c];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t ci, nvmlComputeInstanceInfo_t *info) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!ci_valid(ci) || !info) return NVML_ERROR_INVALID_ARGUMENT;
    ENTER("nvmlComputeInstanceGetInfo_v2", ci->gpu);
    memset(info, 0, sizeof *info);
    info->device = &gpus[ci->gpu].dev; /* the parent GPU, as NVML reports it */
    info->gpuInstance = &gpus[ci->gpu].gis[ci->gi];
    info->id = ci->id;
    info->profileId = ci->profile;
    unsigned start = 0;
    for (int c = 0; c < MAX_CI; c++) /* compute instances fill their GPU instance in slot order */
        if (c < (int)(ci - gpus[ci->gpu].gis[ci->gi].ci) && gpus[ci->gpu].gis[ci->gi].ci[c].used)
            start += gpus[ci->gpu].gis[ci->gi].ci[c].slices;
    info->placement.start = start;
    info->placement.size = ci->slices;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------- what NVIDIA's own binaries also call */

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor) {
    DEVICE("nvmlDeviceGetMinorNumber", device, g);
    if (!minor) return NVML_ERROR_INVALID_ARGUMENT;
    if (is_mig(device)) return NVML_ERROR_NOT_SUPPORTED; /* MIG devices have nvidia-caps minors */
    *minor = gpus[g].minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    DEVICE("nvmlDeviceGetCudaComputeCapability", device, g);
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = gpus[g].cc_major; /* a MIG device answers with its parent's */
    *minor = gpus[g].cc_minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    ENTER("nvmlDeviceGetHandleByUUID", -1);
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < ngpus; i++) {
        if (!strcmp(gpus[i].uuid, uuid)) {
            *device = &gpus[i].dev;
            return NVML_SUCCESS;
        }
        for (int s = 0; s < MAX_GI; s++)
            for (int c = 0; c < MAX_CI; c++) {
                struct nvmlComputeInstance_st *ci = &gpus[i].gis[s].ci[c];
                if (gpus[i].gis[s].used && ci->used && !strcmp(ci->uuid, uuid)) {
                    *device = &ci->dev;
                    return NVML_SUCCESS;
                }
            }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *is_mig_device) {
    DEVICE("nvmlDeviceIsMigDeviceHandle", device, g);
    (void)g;
    if (!is_mig_device) return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig_device = (unsigned)is_mig(device);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t *device) {
    DEVICE("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", mig, g);
    if (!device || !is_mig(mig)) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &gpus[g].dev;
    return NVML_SUCCESS;
}

static nvmlReturn_t fabric(nvmlDevice_t device, const char *symbol, const struct gpu **out) {
    DEVICE(symbol, device, g);
    if (is_mig(device) || !gpus[g].fabric) return NVML_ERROR_NOT_SUPPORTED; /* not fabric-attached */
    *out = &gpus[g];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info) {
    const struct gpu *x;
    nvmlReturn_t rc = fabric(device, "nvmlDeviceGetGpuFabricInfo", &x);
    if (rc != NVML_SUCCESS) return rc;
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    memset(info, 0, sizeof *info);
    memcpy(info->clusterUuid, x->cluster_uuid, sizeof info->clusterUuid);
    info->status = NVML_SUCCESS;
    info->cliqueId = x->clique;
    info->state = NVML_GPU_FABRIC_STATE_COMPLETED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfo_v2_t *info) {
    const struct gpu *x;
    nvmlReturn_t rc = fabric(device, "nvmlDeviceGetGpuFabricInfoV", &x);
    if (rc != NVML_SUCCESS) return rc;
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlGpuFabricInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memset(info, 0, sizeof *info);
    info->version = nvmlGpuFabricInfo_v2;
    memcpy(info->clusterUuid, x->cluster_uuid, sizeof info->clusterUuid);
    info->status = NVML_SUCCESS;
    info->cliqueId = x->clique;
    info->state = NVML_GPU_FABRIC_STATE_COMPLETED;
    return NVML_SUCCESS;
}
