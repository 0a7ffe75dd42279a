/*
 * A fake libnvidia-ml.so.1: the NVML entry points the agent reaches through
 * nvidia-ml-py, with nvml.h's struct layouts, backed by a text file instead of
 * a GPU. The file is named by FAKE_NVML_CONFIG and written by
 * tests/support/libnvml/__init__.py, which documents its lines; it is read at
 * nvmlInitWithFlags and again, at nvmlDeviceGetCount_v2, whenever it was replaced.
 *
 * Driver variants are compile-time, because what differs is which symbols the
 * library exports:
 *   FAKE_NVML_CURRENT  _v3 process lists (24-byte entries), MemoryInfo_v2,
 *                      nvmlDeviceGetRunningProcessDetailList (R535.98 and later) and
 *                      nvmlDeviceGetProcessesUtilizationInfo (R550 and later)
 *   FAKE_NVML_OLD      no _v3 and no MemoryInfo_v2 (R470-era drivers)
 *   FAKE_NVML_R430     as OLD, and no _v2 process lists either (before R450)
 *   FAKE_NVML_R535     _v3 writing 32-byte entries (usedGpuCcProtectedMemory
 *                      appended), with nvmlDeviceGetConfComputeMemSizeInfo but no
 *                      nvmlDeviceGetRunningProcessDetailList (535.43 to 535.86)
 * Every variant lists MPS clients beside compute and graphics processes, in each
 * version it lists those. A GPU marked `blackwell` answers the legacy
 * nvmlDeviceGetProcessUtilization with NOT_SUPPORTED, as R570 drivers do on
 * Blackwell, so only nvmlDeviceGetProcessesUtilizationInfo reads its samples.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define EXPORT __attribute__((visibility("default")))

#ifdef FAKE_NVML_R430
#define FAKE_NVML_OLD
#endif

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

/* nvml.h layouts */
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define NVML_MEMORY_V2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2 << 24)))
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; } nvmlProcessInfo_v1_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_v2_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
    unsigned long long usedGpuCcProtectedMemory;
} nvmlProcessInfo_v3_t;
typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;
typedef struct {
    unsigned long long timeStamp;
    unsigned int pid, smUtil, memUtil, encUtil, decUtil, jpgUtil, ofaUtil;
} nvmlProcessUtilizationInfo_v1_t;
typedef struct {
    unsigned int version, processSamplesCount;
    unsigned long long lastSeenTimeStamp;
    nvmlProcessUtilizationInfo_v1_t *procUtilArray;
} nvmlProcessesUtilizationInfo_v1_t;
#define NVML_PROCESSES_UTILIZATION_INFO_V1 \
    ((unsigned int)(sizeof(nvmlProcessesUtilizationInfo_v1_t) | (1 << 24)))

#define NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFULL
#define MAX_GPUS 64
#define MAX_MIGS 8
#define MAX_PROCS 256
#define MAX_SAMPLES 1024
#define MAX_ERRORS 256
#define TEXT 96

struct proc { char kind; unsigned int pid; unsigned long long mem; };

/* One device: a whole GPU (mig == -1) or one MIG device of it. */
struct device {
    int gpu, mig, present;
    char uuid[TEXT];
    unsigned long long total, used, reserved;
    unsigned int gi, ci;
    int nprocs;
    struct proc procs[MAX_PROCS];
};

struct gpu {
    struct device dev;
    char name[TEXT];
    unsigned int util_gpu, util_mem, temperature, power_mw, limit_mw;
    int mig_mode; /* -1: not MIG-capable */
    int lost;
    int blackwell; /* the legacy per-process utilization call answers NOT_SUPPORTED */
    int nmigs;
    struct device migs[MAX_MIGS];
    int nsamples;
    nvmlProcessUtilizationSample_t samples[MAX_SAMPLES];
};

struct injected { int gpu, mig; char function[TEXT]; nvmlReturn_t code; };

static struct {
    char driver[TEXT];
    int cuda;
    nvmlReturn_t init_error;
    int ngpus;
    struct gpu gpus[MAX_GPUS];
    int nerrors;
    struct injected errors[MAX_ERRORS];
} cfg;

static int initialized;
static struct timespec loaded_mtime;
static ino_t loaded_inode;

static void reset(void) {
    memset(&cfg, 0, sizeof cfg);
    strcpy(cfg.driver, "550.90.07");
    cfg.cuda = 12040;
}

static struct device *device_at(int gpu, int mig) {
    if (gpu < 0 || gpu >= cfg.ngpus) return NULL;
    if (mig < 0) return &cfg.gpus[gpu].dev;
    if (mig >= MAX_MIGS) return NULL;
    return &cfg.gpus[gpu].migs[mig];
}

/* One config line into cfg: 0, or -1 for a line that is malformed or over a MAX_ limit. */
static int parse_line(char *line) {
    char word[TEXT];
    int used;
    if (sscanf(line, "%95s%n", word, &used) != 1 || word[0] == '#') return 0;
    char *rest = line + used;
    if (!strcmp(word, "driver")) return sscanf(rest, "%95s", cfg.driver) == 1 ? 0 : -1;
    if (!strcmp(word, "cuda")) return sscanf(rest, "%d", &cfg.cuda) == 1 ? 0 : -1;
    if (!strcmp(word, "init_error")) return sscanf(rest, "%d", &cfg.init_error) == 1 ? 0 : -1;
    if (!strcmp(word, "gpu")) {
        if (cfg.ngpus >= MAX_GPUS) return -1;
        struct gpu *g = &cfg.gpus[cfg.ngpus];
        int name_at = 0;
        g->dev.gpu = cfg.ngpus;
        g->dev.mig = -1;
        g->dev.present = 1;
        if (sscanf(rest, "%95s %llu %llu %llu %u %u %u %u %u %d %d %n", g->dev.uuid,
                   &g->dev.total, &g->dev.used, &g->dev.reserved, &g->util_gpu, &g->util_mem,
                   &g->temperature, &g->power_mw, &g->limit_mw, &g->mig_mode, &g->lost,
                   &name_at) < 11)
            return -1;
        snprintf(g->name, TEXT, "%s", rest + name_at);
        g->name[strcspn(g->name, "\n")] = 0;
        cfg.ngpus++;
        return 0;
    }
    if (!strcmp(word, "mig")) {
        int gpu, slot;
        struct device d = {0};
        if (sscanf(rest, "%d %d %95s %u %u %llu %llu", &gpu, &slot, d.uuid, &d.gi, &d.ci, &d.total,
                   &d.used) != 7)
            return -1;
        struct device *target = slot < 0 ? NULL : device_at(gpu, slot);
        if (!target) return -1;
        d.gpu = gpu;
        d.mig = slot;
        d.present = 1;
        *target = d;
        if (slot + 1 > cfg.gpus[gpu].nmigs) cfg.gpus[gpu].nmigs = slot + 1;
        return 0;
    }
    if (!strcmp(word, "slots")) {
        int gpu, count;
        if (sscanf(rest, "%d %d", &gpu, &count) != 2 || !device_at(gpu, -1) || count < 0 ||
            count > MAX_MIGS)
            return -1;
        cfg.gpus[gpu].nmigs = count;
        return 0;
    }
    if (!strcmp(word, "proc")) {
        int gpu, mig;
        char kind;
        unsigned int pid;
        long long mem;
        if (sscanf(rest, "%d %d %c %u %lld", &gpu, &mig, &kind, &pid, &mem) != 5) return -1;
        struct device *d = device_at(gpu, mig);
        if (!d || d->nprocs >= MAX_PROCS || !strchr("cgm", kind)) return -1;
        d->procs[d->nprocs++] = (struct proc){kind, pid, mem < 0 ? NOT_AVAILABLE : (unsigned long long)mem};
        return 0;
    }
    if (!strcmp(word, "blackwell")) {
        int gpu;
        if (sscanf(rest, "%d", &gpu) != 1 || !device_at(gpu, -1)) return -1;
        cfg.gpus[gpu].blackwell = 1;
        return 0;
    }
    if (!strcmp(word, "sample")) {
        int gpu;
        nvmlProcessUtilizationSample_t s = {0};
        if (sscanf(rest, "%d %u %llu %u", &gpu, &s.pid, &s.timeStamp, &s.smUtil) != 4) return -1;
        if (!device_at(gpu, -1) || cfg.gpus[gpu].nsamples >= MAX_SAMPLES) return -1;
        cfg.gpus[gpu].samples[cfg.gpus[gpu].nsamples++] = s;
        return 0;
    }
    if (!strcmp(word, "error")) {
        if (cfg.nerrors >= MAX_ERRORS) return -1;
        struct injected *e = &cfg.errors[cfg.nerrors];
        if (sscanf(rest, "%d %d %95s %d", &e->gpu, &e->mig, e->function, &e->code) != 4) return -1;
        cfg.nerrors++;
        return 0;
    }
    return -1;
}

/* (Re)read the config when it changed since the last read. */
static nvmlReturn_t load(void) {
    const char *path = getenv("FAKE_NVML_CONFIG");
    struct stat st;
    if (!path || stat(path, &st) != 0) {
        fprintf(stderr, "fake libnvidia-ml: FAKE_NVML_CONFIG names no readable file\n");
        return NVML_ERROR_UNKNOWN;
    }
    /* Writers replace the file, so a new inode means new content even within one mtime tick. */
    if (st.st_ino == loaded_inode && st.st_mtim.tv_sec == loaded_mtime.tv_sec &&
        st.st_mtim.tv_nsec == loaded_mtime.tv_nsec)
        return NVML_SUCCESS;
    FILE *file = fopen(path, "r");
    if (!file) return NVML_ERROR_UNKNOWN;
    reset();
    char line[512];
    int number = 0, bad = 0;
    while (!bad && fgets(line, sizeof line, file)) {
        number++;
        bad = parse_line(line) != 0;
    }
    fclose(file);
    /* A test whose config is cut short must fail, not pass on what was left of it. */
    if (bad) {
        fprintf(stderr, "fake libnvidia-ml: %s line %d is malformed or over a limit: %s", path,
                number, line);
        return NVML_ERROR_UNKNOWN;
    }
    loaded_mtime = st.st_mtim;
    loaded_inode = st.st_ino;
    return NVML_SUCCESS;
}

static nvmlReturn_t injected(const char *function, const struct device *d) {
    for (int i = 0; i < cfg.nerrors; i++) {
        const struct injected *e = &cfg.errors[i];
        if (strcmp(e->function, function)) continue;
        if (d == NULL ? e->gpu == -1 : (e->gpu == d->gpu && e->mig == d->mig)) return e->code;
    }
    return NVML_SUCCESS;
}

/* The checks every device call starts with; a handle is a pointer to a struct device. */
static nvmlReturn_t enter(const char *function, void *handle) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    struct device *d = handle;
    if (!d) return NVML_ERROR_INVALID_ARGUMENT;
    if (cfg.gpus[d->gpu].lost) return NVML_ERROR_GPU_IS_LOST;
    return injected(function, d);
}

#define ENTER(handle)                                   \
    do {                                                \
        nvmlReturn_t entered = enter(__func__, handle); \
        if (entered != NVML_SUCCESS) return entered;    \
    } while (0)

static nvmlReturn_t copy_text(const char *text, char *out, unsigned int length) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(text) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, text);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    nvmlReturn_t ret = load();
    if (ret != NVML_SUCCESS) return ret;
    if (cfg.init_error) return cfg.init_error;
    initialized = 1;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    initialized = 0;
    return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    static char text[TEXT];
    snprintf(text, sizeof text, "fake NVML error %d", result);
    return text;
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    return copy_text(cfg.driver, version, length);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    *version = cfg.cuda;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t ret = load();
    if (ret == NVML_SUCCESS) ret = injected("nvmlDeviceGetCount_v2", NULL);
    if (ret != NVML_SUCCESS) return ret;
    *count = (unsigned int)cfg.ngpus;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (index >= (unsigned int)cfg.ngpus || !device) return NVML_ERROR_INVALID_ARGUMENT;
    ENTER(&cfg.gpus[index].dev);
    *device = &cfg.gpus[index].dev;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(void *device, char *uuid, unsigned int length) {
    ENTER(device);
    return copy_text(((struct device *)device)->uuid, uuid, length);
}

/* The fake's minor numbers are the GPUs' indexes, as on most single-root hosts. */
EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(void *device, unsigned int *minor) {
    ENTER(device);
    if (!minor) return NVML_ERROR_INVALID_ARGUMENT;
    *minor = (unsigned int)((struct device *)device)->gpu;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(void *device, char *name, unsigned int length) {
    ENTER(device);
    return copy_text(cfg.gpus[((struct device *)device)->gpu].name, name, length);
}

static void fill_memory(const struct device *d, int with_reserved, unsigned long long *total,
                        unsigned long long *free, unsigned long long *used) {
    /* v1 counts the driver's reserved memory as used; v2 reports it apart. */
    *used = d->used + (with_reserved ? d->reserved : 0);
    *total = d->total;
    *free = d->total - d->used - d->reserved;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(void *device, nvmlMemory_t *memory) {
    ENTER(device);
    fill_memory(device, 1, &memory->total, &memory->free, &memory->used);
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OLD
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(void *device, nvmlMemory_v2_t *memory) {
    ENTER(device);
    if (memory->version != NVML_MEMORY_V2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    fill_memory(device, 0, &memory->total, &memory->free, &memory->used);
    memory->reserved = ((struct device *)device)->reserved;
    return NVML_SUCCESS;
}
#endif

static int mig_enabled(const struct device *d) {
    return d->mig >= 0 || cfg.gpus[d->gpu].mig_mode == 1;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(void *device, nvmlUtilization_t *rates) {
    ENTER(device);
    /* nvml.h: not supported in MIG mode, for the GPU as for its MIG devices. */
    if (mig_enabled(device)) return NVML_ERROR_NOT_SUPPORTED;
    const struct gpu *g = &cfg.gpus[((struct device *)device)->gpu];
    rates->gpu = g->util_gpu;
    rates->memory = g->util_mem;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(void *device, int sensor, unsigned int *temp) {
    ENTER(device);
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = cfg.gpus[((struct device *)device)->gpu].temperature;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(void *device, unsigned int *power) {
    ENTER(device);
    *power = cfg.gpus[((struct device *)device)->gpu].power_mw;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(void *device, unsigned int *limit) {
    ENTER(device);
    *limit = cfg.gpus[((struct device *)device)->gpu].limit_mw;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(void *device, unsigned int *current, unsigned int *pending) {
    ENTER(device);
    int mode = cfg.gpus[((struct device *)device)->gpu].mig_mode;
    if (mode < 0) return NVML_ERROR_NOT_SUPPORTED;
    *current = *pending = (unsigned int)mode;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(void *device, unsigned int *count) {
    ENTER(device);
    const struct gpu *g = &cfg.gpus[((struct device *)device)->gpu];
    if (g->mig_mode < 0) return NVML_ERROR_NOT_SUPPORTED;
    *count = (unsigned int)g->nmigs;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(void *device, unsigned int index,
                                                        void **mig) {
    ENTER(device);
    struct gpu *g = &cfg.gpus[((struct device *)device)->gpu];
    if (g->mig_mode != 1) return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= (unsigned int)g->nmigs) return NVML_ERROR_INVALID_ARGUMENT;
    /* An error injected on the slot's own MIG device fails its lookup. */
    nvmlReturn_t ret = injected(__func__, &g->migs[index]);
    if (ret != NVML_SUCCESS) return ret;
    if (!g->migs[index].present) return NVML_ERROR_NOT_FOUND;
    *mig = &g->migs[index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(void *device, unsigned int *id) {
    ENTER(device);
    const struct device *d = device;
    if (d->mig < 0) return NVML_ERROR_INVALID_ARGUMENT;
    *id = d->gi;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(void *device, unsigned int *id) {
    ENTER(device);
    const struct device *d = device;
    if (d->mig < 0) return NVML_ERROR_INVALID_ARGUMENT;
    *id = d->ci;
    return NVML_SUCCESS;
}

/*
 * The process-list contract of nvml.h: *count in is the array's capacity, out
 * the number of entries; NVML_SUCCESS with 0 when there are none, and
 * INSUFFICIENT_SIZE (with the needed count) when the array is too small.
 * Every version writes the fields it has; `size` is the entry stride.
 */
static nvmlReturn_t list_processes(const char *function, void *device, char kind,
                                   unsigned int *count, void *infos, size_t size) {
    nvmlReturn_t entered = enter(function, device);
    if (entered != NVML_SUCCESS) return entered;
    const struct device *d = device;
    unsigned int found = 0;
    for (int i = 0; i < d->nprocs; i++) found += d->procs[i].kind == kind;
    if (found == 0) {
        *count = 0;
        return NVML_SUCCESS;
    }
    if (!infos || *count < found) {
        *count = found;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned char *out = infos;
    for (int i = 0; i < d->nprocs; i++) {
        if (d->procs[i].kind != kind) continue;
        nvmlProcessInfo_v3_t entry = {d->procs[i].pid, d->procs[i].mem,
                                      d->mig >= 0 ? d->gi : 0xFFFFFFFFu,
                                      d->mig >= 0 ? d->ci : 0xFFFFFFFFu, 0};
        memcpy(out, &entry, size);
        out += size;
    }
    *count = found;
    return NVML_SUCCESS;
}

/* Errors are injected per list under the unversioned name, whichever version is called. */
#define PROCESS_LISTS(suffix, entry)                                                        \
    EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses##suffix(                      \
        void *device, unsigned int *count, entry *infos) {                                  \
        return list_processes("nvmlDeviceGetComputeRunningProcesses", device, 'c', count, \
                              infos, sizeof(entry));                                        \
    }                                                                                       \
    EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses##suffix(                     \
        void *device, unsigned int *count, entry *infos) {                                  \
        return list_processes("nvmlDeviceGetGraphicsRunningProcesses", device, 'g', count, \
                              infos, sizeof(entry));                                        \
    }                                                                                       \
    EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses##suffix(                   \
        void *device, unsigned int *count, entry *infos) {                                  \
        return list_processes("nvmlDeviceGetMPSComputeRunningProcesses", device, 'm',      \
                              count, infos, sizeof(entry));                                 \
    }

PROCESS_LISTS(, nvmlProcessInfo_v1_t)
#ifndef FAKE_NVML_R430
PROCESS_LISTS(_v2, nvmlProcessInfo_v2_t)
#endif
#if defined(FAKE_NVML_R535)
PROCESS_LISTS(_v3, nvmlProcessInfo_v3_t)
#elif !defined(FAKE_NVML_OLD)
PROCESS_LISTS(_v3, nvmlProcessInfo_v2_t)
#endif

#ifndef FAKE_NVML_OLD
/* Exported for their presence: tools tell the R535 variants apart by these symbols. */
EXPORT nvmlReturn_t nvmlDeviceGetConfComputeMemSizeInfo(void *device, void *info) {
    (void)info;
    ENTER(device);
    return NVML_ERROR_NOT_SUPPORTED;
}
#endif
#if !defined(FAKE_NVML_OLD) && !defined(FAKE_NVML_R535)
EXPORT nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(void *device, void *plist) {
    (void)plist;
    ENTER(device);
    return NVML_ERROR_NOT_SUPPORTED;
}
#endif

EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(void *device,
                                                    nvmlProcessUtilizationSample_t *samples,
                                                    unsigned int *count,
                                                    unsigned long long since) {
    ENTER(device);
    if (mig_enabled(device)) return NVML_ERROR_NOT_SUPPORTED;
    const struct gpu *g = &cfg.gpus[((struct device *)device)->gpu];
    if (g->blackwell) return NVML_ERROR_NOT_SUPPORTED;
    unsigned int fresh = 0;
    for (int i = 0; i < g->nsamples; i++) fresh += g->samples[i].timeStamp > since;
    /* No sample newer than `since`: an idle GPU. */
    if (fresh == 0) return NVML_ERROR_NOT_FOUND;
    if (!samples || *count < fresh) {
        *count = fresh;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned int n = 0;
    for (int i = 0; i < g->nsamples; i++)
        if (g->samples[i].timeStamp > since) samples[n++] = g->samples[i];
    *count = n;
    return NVML_SUCCESS;
}

#if !defined(FAKE_NVML_OLD) && !defined(FAKE_NVML_R535)
/*
 * R550's per-process utilization: the same samples as the legacy call, in a
 * versioned struct. processSamplesCount in is the array's capacity, out the
 * number written (or needed, with INSUFFICIENT_SIZE); lastSeenTimeStamp is `since`.
 */
EXPORT nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(void *device,
                                                          nvmlProcessesUtilizationInfo_v1_t *info) {
    ENTER(device);
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != NVML_PROCESSES_UTILIZATION_INFO_V1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (mig_enabled(device)) return NVML_ERROR_NOT_SUPPORTED;
    const struct gpu *g = &cfg.gpus[((struct device *)device)->gpu];
    unsigned long long since = info->lastSeenTimeStamp;
    unsigned int fresh = 0;
    for (int i = 0; i < g->nsamples; i++) fresh += g->samples[i].timeStamp > since;
    if (fresh == 0) return NVML_ERROR_NOT_FOUND;
    if (!info->procUtilArray || info->processSamplesCount < fresh) {
        info->processSamplesCount = fresh;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned int n = 0;
    for (int i = 0; i < g->nsamples; i++) {
        const nvmlProcessUtilizationSample_t *s = &g->samples[i];
        if (s->timeStamp <= since) continue;
        info->procUtilArray[n++] = (nvmlProcessUtilizationInfo_v1_t){
            s->timeStamp, s->pid, s->smUtil, s->memUtil, s->encUtil, s->decUtil, 0, 0};
    }
    info->processSamplesCount = n;
    return NVML_SUCCESS;
}
#endif

/* NVML events (and PCI bus IDs), in a file of their own. */
#include "fake_nvml_events.c"
