/*
 * NVML's event API for the fake libnvidia-ml.so.1, included at the end of
 * fake_nvml.c (it uses that file's devices and checks).
 *
 * Events come from a file named by FAKE_NVML_EVENTS that tests append to, one
 * line each (written by tests/support/libnvml/events.py):
 *
 *     GPU TYPE DATA GI CI    an event of nvmlEventType TYPE on GPU (its index), e.g.
 *                            "0 8 13 4294967295 4294967295" for XID 13 on a whole GPU
 *     fail CODE              the next wait on every set returns CODE (a driver reset)
 *
 * A set delivers what is appended after it was created, once, to waits on it,
 * for the GPUs and types registered on it. Every GPU supports single- and
 * double-bit ECC and XID events; nvmlDeviceGetSupportedEventTypes fails where an
 * `error` line says so. Sets are read under one lock, since the agent waits in
 * a thread of its own beside its scans. PCI bus IDs follow the GPU's index:
 * GPU i is at 00000000:(0x3B + i):00.0.
 */
#include <errno.h>
#include <pthread.h>
#include <time.h>

#define FAKE_EVENT_TYPES 0x0bULL /* single-bit ECC | double-bit ECC | XID */
#define NVML_ERROR_TIMEOUT 10
#define NO_INSTANCE 0xFFFFFFFFu

typedef struct {
    void *device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

struct event_set {
    long offset; /* how far into the events file this set has read */
    unsigned long long registered[MAX_GPUS];
};

static pthread_mutex_t events_lock = PTHREAD_MUTEX_INITIALIZER;

static long events_size(void) {
    const char *path = getenv("FAKE_NVML_EVENTS");
    struct stat st;
    if (!path || stat(path, &st) != 0) return 0;
    return (long)st.st_size;
}

EXPORT nvmlReturn_t nvmlEventSetCreate(struct event_set **set) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    struct event_set *created = calloc(1, sizeof *created);
    if (!created) return NVML_ERROR_UNKNOWN;
    created->offset = events_size();
    *set = created;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlEventSetFree(struct event_set *set) {
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    free(set);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(void *device, unsigned long long *types) {
    ENTER(device);
    if (!types) return NVML_ERROR_INVALID_ARGUMENT;
    *types = FAKE_EVENT_TYPES;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(void *device, unsigned long long types,
                                             struct event_set *set) {
    ENTER(device);
    const struct device *d = device;
    if (!set || d->mig >= 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (types & ~FAKE_EVENT_TYPES) return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&events_lock);
    set->registered[d->gpu] |= types;
    pthread_mutex_unlock(&events_lock);
    return NVML_SUCCESS;
}

/* nvml.h's nvmlPciInfo_t (the _v3 layout). */
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(void *device, nvmlPciInfo_t *pci) {
    ENTER(device);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    const struct device *d = device;
    memset(pci, 0, sizeof *pci);
    pci->bus = 0x3B + (unsigned int)d->gpu;
    pci->pciDeviceId = 0x233510DE;
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", 0u, pci->bus, 0u);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", 0u, pci->bus, 0u);
    return NVML_SUCCESS;
}

/* The next event for `set` from the file, 1 when one was found, 0 if none yet, or an error. */
static int next_event(struct event_set *set, nvmlEventData_t *data, nvmlReturn_t *failed) {
    const char *path = getenv("FAKE_NVML_EVENTS");
    if (!path) return 0;
    FILE *file = fopen(path, "r");
    if (!file) return 0;
    int found = 0;
    char line[256];
    if (fseek(file, set->offset, SEEK_SET) == 0) {
        while (!found && fgets(line, sizeof line, file)) {
            if (!strchr(line, '\n')) break; /* still being written */
            set->offset = ftell(file);
            int gpu, code;
            unsigned long long type, value;
            unsigned int gi, ci;
            if (sscanf(line, "fail %d", &code) == 1) {
                *failed = code;
                found = -1;
            } else if (sscanf(line, "%d %llu %llu %u %u", &gpu, &type, &value, &gi, &ci) == 5 &&
                       gpu >= 0 && gpu < MAX_GPUS && (set->registered[gpu] & type)) {
                *data = (nvmlEventData_t){&cfg.gpus[gpu].dev, type, value, gi, ci};
                found = 1;
            }
        }
    }
    fclose(file);
    return found;
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(struct event_set *set, nvmlEventData_t *data,
                                        unsigned int timeout_ms) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!set || !data) return NVML_ERROR_INVALID_ARGUMENT;
    if (!getenv("FAKE_NVML_EVENTS")) {
        /* No events file: nothing will ever arrive, so wait out the timeout at once. */
        struct timespec whole = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000};
        while (nanosleep(&whole, &whole) != 0 && errno == EINTR) {
        }
        return NVML_ERROR_TIMEOUT;
    }
    struct timespec step = {0, 1000000}; /* 1 ms between looks at the file */
    for (unsigned int waited = 0;; waited++) {
        nvmlReturn_t failed = NVML_SUCCESS;
        pthread_mutex_lock(&events_lock);
        int found = next_event(set, data, &failed);
        pthread_mutex_unlock(&events_lock);
        if (found > 0) return NVML_SUCCESS;
        if (found < 0) return failed;
        if (waited >= timeout_ms) return NVML_ERROR_TIMEOUT;
        while (nanosleep(&step, &step) != 0 && errno == EINTR) {
        }
        step.tv_nsec = 1000000;
    }
}
