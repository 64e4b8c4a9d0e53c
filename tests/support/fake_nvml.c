/* A stand-in for libnvidia-ml.so.1 that plays back scripted readings, so that the real nvidia-ml-py
 * (pynvml) code path runs on a machine without GPUs. Built by tests/support/fake_nvml.py with `cc`.
 *
 * It exports the NVML symbols the binding calls for what the GPU sampler reads (runtime/nvml_devices.py).
 * The script ($FAKE_NVML_SCRIPT) is read at nvmlInitWithFlags, one tab-separated record per line:
 *
 *   gpu     NAME  UUID  MEMORY_TOTAL_BYTES  GPM(0|1)  MIG(0|1)  POWER(0|1)
 *   mig     PARENT_GPU_INDEX  GPU_INSTANCE_ID  NAME  UUID  MEMORY_TOTAL_BYTES
 *   profile PARENT_GPU_INDEX  PROFILE_ID  NAME  SLICES  MEMORY_MB
 *   tick    DEVICE  SM  OCCUPANCY  MEMORY_USED_BYTES  POWER_MW  ERROR
 *
 * DEVICE numbers the gpu and mig records in the order they appear. Each device plays its ticks in order:
 * a tick is taken by the call that reads its activity (nvmlDeviceGetUtilizationRates, nvmlGpmSampleGet,
 * nvmlGpmMigSampleGet; for a device without one, every nvmlDeviceGetMemoryInfo after the first), and the
 * other reads answer from the current tick; after the last tick the last one repeats. A tick with a
 * non-zero ERROR makes every call about that device return that NVML error; ERROR -1 makes the call that takes
 * the tick hang for good (a wedged driver), -2 crash the process in it (a segfault inside libnvidia-ml).
 * $FAKE_NVML_INIT_ERROR makes nvmlInitWithFlags fail with that code, $FAKE_NVML_INIT_HANG=1 never return.
 * $FAKE_NVML_CALLS names a file each call's name is appended to.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7

#define MAX_DEVICES 64
#define MAX_TICKS 4096
#define MAX_PROFILES 32

typedef struct {
    double sm, occupancy;
    unsigned long long memory;
    unsigned int power;
    int error;
} tick_t;

typedef struct device {
    int is_mig;
    int parent;           /* index into devices of the GPU of a MIG slice */
    int gpu_index;        /* for a GPU: its NVML index */
    unsigned int instance;
    char name[96];
    char uuid[96];
    unsigned long long memory_total;
    int gpm, mig_mode, power;
    tick_t ticks[MAX_TICKS];
    int nticks;
    int cursor;           /* the tick being played; -1 before the first */
    int memory_calls;
} device_t;

typedef struct {
    int gpu;
    unsigned int id, slices;
    unsigned long long memory_mb;
    char name[96];
} profile_t;

typedef struct {
    device_t *device;
    int tick;
} gpm_sample_t;

typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    struct { char *shortName, *longName, *unit; } metricInfo;
} gpm_metric_t;

typedef struct {
    unsigned int version, numMetrics;
    gpm_sample_t *sample1, *sample2;
    gpm_metric_t metrics[477];
} gpm_metrics_get_t;

typedef struct {
    unsigned int version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount,
        decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
} profile_info_v2_t;

static device_t devices[MAX_DEVICES];
static int ndevices, ngpus;
static profile_t profiles[MAX_PROFILES];
static int nprofiles;
static int initialised;

static void called(const char *name) {
    const char *path = getenv("FAKE_NVML_CALLS");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "%s\n", name);
    fclose(f);
}

static char *field(char **rest) {
    char *start = *rest;
    if (!start) return "";
    char *tab = strchr(start, '\t');
    if (tab) { *tab = 0; *rest = tab + 1; } else { *rest = NULL; }
    char *nl = strchr(start, '\n');
    if (nl) *nl = 0;
    return start;
}

static int load(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[1024];
    ndevices = ngpus = nprofiles = 0;
    while (fgets(line, sizeof line, f)) {
        char *rest = line;
        char *kind = field(&rest);
        if (!strcmp(kind, "gpu") && ndevices < MAX_DEVICES) {
            device_t *d = &devices[ndevices++];
            memset(d, 0, sizeof *d);
            d->gpu_index = ngpus++;
            snprintf(d->name, sizeof d->name, "%s", field(&rest));
            snprintf(d->uuid, sizeof d->uuid, "%s", field(&rest));
            d->memory_total = strtoull(field(&rest), NULL, 10);
            d->gpm = atoi(field(&rest));
            d->mig_mode = atoi(field(&rest));
            d->power = atoi(field(&rest));
            d->cursor = -1;
        } else if (!strcmp(kind, "mig") && ndevices < MAX_DEVICES) {
            int parent_index = atoi(field(&rest));
            device_t *d = &devices[ndevices++];
            memset(d, 0, sizeof *d);
            d->is_mig = 1;
            d->parent = -1;
            for (int i = 0; i < ndevices - 1; i++)
                if (!devices[i].is_mig && devices[i].gpu_index == parent_index) d->parent = i;
            d->instance = (unsigned int)atoi(field(&rest));
            snprintf(d->name, sizeof d->name, "%s", field(&rest));
            snprintf(d->uuid, sizeof d->uuid, "%s", field(&rest));
            d->memory_total = strtoull(field(&rest), NULL, 10);
            d->power = 0;
            d->cursor = -1;
        } else if (!strcmp(kind, "profile") && nprofiles < MAX_PROFILES) {
            profile_t *p = &profiles[nprofiles++];
            p->gpu = atoi(field(&rest));
            p->id = (unsigned int)atoi(field(&rest));
            snprintf(p->name, sizeof p->name, "%s", field(&rest));
            p->slices = (unsigned int)atoi(field(&rest));
            p->memory_mb = strtoull(field(&rest), NULL, 10);
        } else if (!strcmp(kind, "tick")) {
            int which = atoi(field(&rest));
            if (which < 0 || which >= ndevices || devices[which].nticks >= MAX_TICKS) continue;
            tick_t *t = &devices[which].ticks[devices[which].nticks++];
            t->sm = atof(field(&rest));
            t->occupancy = atof(field(&rest));
            t->memory = strtoull(field(&rest), NULL, 10);
            t->power = (unsigned int)strtoul(field(&rest), NULL, 10);
            t->error = atoi(field(&rest));
        }
    }
    fclose(f);
    return 0;
}

static int valid(device_t *d) { return d >= devices && d < devices + ndevices; }

static tick_t *current(device_t *d) {
    static tick_t none;
    if (!d->nticks) return &none;
    int at = d->cursor < 0 ? 0 : d->cursor;
    if (at >= d->nticks) at = d->nticks - 1;
    return &d->ticks[at];
}

static void wedged(void) {
    for (;;) pause();
}

static tick_t *advance(device_t *d) {
    d->cursor++;
    tick_t *t = current(d);
    if (t->error == -1) wedged();
    if (t->error == -2) *(volatile int *)0 = 1;  /* a segfault, as a driver bug gives one */
    return t;
}

static int has_activity(device_t *d) {
    if (!d->is_mig) return 1;
    return d->parent >= 0 && devices[d->parent].gpm;
}

#define CHECK(d)                                              \
    do {                                                      \
        if (!initialised) return NVML_ERROR_UNINITIALIZED;    \
        if (!valid(d)) return NVML_ERROR_INVALID_ARGUMENT;    \
    } while (0)

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    called("nvmlInitWithFlags");
    const char *hang = getenv("FAKE_NVML_INIT_HANG");
    if (hang && atoi(hang)) wedged();
    const char *error = getenv("FAKE_NVML_INIT_ERROR");
    if (error && atoi(error)) return atoi(error);
    const char *script = getenv("FAKE_NVML_SCRIPT");
    if (!script || load(script)) return NVML_ERROR_NOT_FOUND;
    initialised = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) {
    called("nvmlShutdown");
    initialised = 0;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case 15: return "GPU is lost";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    called("nvmlDeviceGetCount_v2");
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    *count = (unsigned int)ngpus;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, device_t **device) {
    called("nvmlDeviceGetHandleByIndex_v2");
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    for (int i = 0; i < ndevices; i++)
        if (!devices[i].is_mig && devices[i].gpu_index == (int)index) { *device = &devices[i]; return NVML_SUCCESS; }
    return NVML_ERROR_INVALID_ARGUMENT;
}

static nvmlReturn_t copy_text(const char *text, char *out, unsigned int length) {
    if (strlen(text) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, text);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(device_t *d, char *name, unsigned int length) {
    called("nvmlDeviceGetName");
    CHECK(d);
    if (current(d)->error) return current(d)->error;
    return copy_text(d->name, name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(device_t *d, char *uuid, unsigned int length) {
    called("nvmlDeviceGetUUID");
    CHECK(d);
    if (current(d)->error) return current(d)->error;
    return copy_text(d->uuid, uuid, length);
}

typedef struct { unsigned long long total, free, used; } memory_t;

nvmlReturn_t nvmlDeviceGetMemoryInfo(device_t *d, memory_t *memory) {
    called("nvmlDeviceGetMemoryInfo");
    CHECK(d);
    tick_t *t = current(d);
    if (!has_activity(d) && d->memory_calls++ > 0) t = advance(d);
    if (t->error) return t->error;
    memory->total = d->memory_total;
    memory->used = t->memory;
    memory->free = d->memory_total > t->memory ? d->memory_total - t->memory : 0;
    return NVML_SUCCESS;
}

typedef struct { unsigned int gpu, memory; } utilization_t;

nvmlReturn_t nvmlDeviceGetUtilizationRates(device_t *d, utilization_t *utilization) {
    called("nvmlDeviceGetUtilizationRates");
    CHECK(d);
    if (d->is_mig) return NVML_ERROR_NOT_SUPPORTED;  /* as on real MIG slices */
    tick_t *t = advance(d);
    if (t->error) return t->error;
    utilization->gpu = (unsigned int)(t->sm + 0.5);
    utilization->memory = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(device_t *d, unsigned int *power) {
    called("nvmlDeviceGetPowerUsage");
    CHECK(d);
    if (current(d)->error) return current(d)->error;
    if (!d->power) return NVML_ERROR_NOT_SUPPORTED;
    *power = current(d)->power;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(device_t *d, unsigned int *current_mode, unsigned int *pending) {
    called("nvmlDeviceGetMigMode");
    CHECK(d);
    if (d->is_mig) return NVML_ERROR_NOT_SUPPORTED;
    *current_mode = *pending = (unsigned int)d->mig_mode;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(device_t *d, unsigned int *count) {
    called("nvmlDeviceGetMaxMigDeviceCount");
    CHECK(d);
    *count = d->mig_mode ? 7 : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(device_t *d, unsigned int index, device_t **mig) {
    called("nvmlDeviceGetMigDeviceHandleByIndex");
    CHECK(d);
    unsigned int seen = 0;
    for (int i = 0; i < ndevices; i++) {
        if (devices[i].is_mig && devices[i].parent == d - devices) {
            if (seen++ == index) { *mig = &devices[i]; return NVML_SUCCESS; }
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(device_t *d, unsigned int *is_mig) {
    called("nvmlDeviceIsMigDeviceHandle");
    CHECK(d);
    *is_mig = (unsigned int)d->is_mig;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(device_t *d, unsigned int *id) {
    called("nvmlDeviceGetGpuInstanceId");
    CHECK(d);
    if (!d->is_mig) return NVML_ERROR_NOT_SUPPORTED;
    *id = d->instance;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(device_t *d, device_t **parent) {
    called("nvmlDeviceGetDeviceHandleFromMigDeviceHandle");
    CHECK(d);
    if (!d->is_mig || d->parent < 0) return NVML_ERROR_NOT_SUPPORTED;
    *parent = &devices[d->parent];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(device_t *d, unsigned int profile, profile_info_v2_t *info) {
    called("nvmlDeviceGetGpuInstanceProfileInfoV");
    CHECK(d);
    for (int i = 0; i < nprofiles; i++) {
        if (profiles[i].gpu == d->gpu_index && profiles[i].id == profile && !d->is_mig) {
            unsigned int version = info->version;
            memset(info, 0, sizeof *info);
            info->version = version;
            info->id = profile;
            info->sliceCount = profiles[i].slices;
            info->instanceCount = 1;
            info->memorySizeMB = profiles[i].memory_mb;
            snprintf(info->name, sizeof info->name, "%s", profiles[i].name);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_SUPPORTED;
}

typedef struct { unsigned int version, isSupportedDevice; } gpm_support_t;

nvmlReturn_t nvmlGpmQueryDeviceSupport(device_t *d, gpm_support_t *support) {
    called("nvmlGpmQueryDeviceSupport");
    CHECK(d);
    support->isSupportedDevice = (unsigned int)d->gpm;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleAlloc(gpm_sample_t **sample) {
    called("nvmlGpmSampleAlloc");
    *sample = calloc(1, sizeof **sample);
    return *sample ? NVML_SUCCESS : 20;
}

nvmlReturn_t nvmlGpmSampleFree(gpm_sample_t *sample) {
    called("nvmlGpmSampleFree");
    free(sample);
    return NVML_SUCCESS;
}

static nvmlReturn_t take(device_t *d, gpm_sample_t *sample) {
    tick_t *t = advance(d);
    if (t->error) return t->error;
    sample->device = d;
    sample->tick = d->cursor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleGet(device_t *d, gpm_sample_t *sample) {
    called("nvmlGpmSampleGet");
    CHECK(d);
    if (!d->gpm || d->is_mig) return NVML_ERROR_NOT_SUPPORTED;
    return take(d, sample);
}

nvmlReturn_t nvmlGpmMigSampleGet(device_t *d, unsigned int instance, gpm_sample_t *sample) {
    called("nvmlGpmMigSampleGet");
    CHECK(d);
    if (!d->gpm) return NVML_ERROR_NOT_SUPPORTED;
    for (int i = 0; i < ndevices; i++)
        if (devices[i].is_mig && devices[i].parent == d - devices && devices[i].instance == instance)
            return take(&devices[i], sample);
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlGpmMetricsGet(gpm_metrics_get_t *get) {
    called("nvmlGpmMetricsGet");
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!get->sample1 || !get->sample2 || !get->sample1->device || get->sample1->device != get->sample2->device)
        return NVML_ERROR_INVALID_ARGUMENT;
    device_t *d = get->sample2->device;
    int at = get->sample2->tick < d->nticks ? get->sample2->tick : d->nticks - 1;
    tick_t *t = at >= 0 ? &d->ticks[at] : current(d);
    for (unsigned int i = 0; i < get->numMetrics && i < 477; i++) {
        gpm_metric_t *m = &get->metrics[i];
        m->nvmlReturn = NVML_SUCCESS;
        if (m->metricId == 2) m->value = t->sm;             /* NVML_GPM_METRIC_SM_UTIL */
        else if (m->metricId == 3) m->value = t->occupancy; /* NVML_GPM_METRIC_SM_OCCUPANCY */
        else m->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
}
