/* A stand-in for the driver's libnvidia-ml.so.1 at the library boundary: the NVML C entry
 * points that pynvml calls for what the detector reads, answering from a state file named by
 * $AUTOCLUSTERS_FAKE_NVML_STATE, read again at every call (so a test changes the GPUs
 * between two polls). Signatures and struct layouts as nvidia-ml-py's pynvml.py declares
 * them (nvmlPciInfo_t, the *_v2/_v3 entry points); error codes are NVML's nvmlReturn_t.
 *
 * State file, one item a line:
 *   driver 550.54.15          nvml 12.550.54.15          init_error 9     (optional)
 *   gpu bus=00000000:3B:00.0 uuid=GPU-... name=NVIDIA_H100 ecc_volatile=0 ecc_aggregate=0
 *       remap=CORR,UNC,PENDING,FAILURE retired_pending=0 links=1,1,0 lost=0
 * A value "-" answers NVML_ERROR_NOT_SUPPORTED; "_" in a name is a space.
 * Built by tests/nvml_stub/__init__.py: cc -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OK = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, GPU_IS_LOST = 15, UNKNOWN = 999 };
#define MAX_GPUS 16
#define MAX_LINKS 36

typedef struct {
    char bus[64], uuid[96], name[96], remap[64], links[128];
    char ecc_volatile[32], ecc_aggregate[32], retired[8];
    int lost;
} gpu_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} pci_t;

static char driver[80] = "0.0", nvml_version[80] = "0.0";
static int init_error, count_error, ngpus, initialised;
static gpu_t gpus[MAX_GPUS];

static void field(const char *tok, const char *key, char *out, size_t n) {
    size_t k = strlen(key);
    if (strncmp(tok, key, k) == 0 && tok[k] == '=') {
        snprintf(out, n, "%s", tok + k + 1);
    }
}

static void load(void) {
    const char *path = getenv("AUTOCLUSTERS_FAKE_NVML_STATE");
    FILE *f = path ? fopen(path, "r") : NULL;
    char line[1024];
    init_error = count_error = ngpus = 0;
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        char *save = NULL, *tok = strtok_r(line, " \t\n", &save);
        if (!tok) continue;
        if (!strcmp(tok, "driver") || !strcmp(tok, "nvml") || !strcmp(tok, "init_error") ||
            !strcmp(tok, "count_error")) {
            char *v = strtok_r(NULL, " \t\n", &save);
            if (!v) continue;
            if (!strcmp(tok, "driver")) snprintf(driver, sizeof driver, "%s", v);
            else if (!strcmp(tok, "nvml")) snprintf(nvml_version, sizeof nvml_version, "%s", v);
            else if (!strcmp(tok, "init_error")) init_error = atoi(v);
            else count_error = atoi(v);
        } else if (!strcmp(tok, "gpu") && ngpus < MAX_GPUS) {
            gpu_t *g = &gpus[ngpus++];
            char lost[8] = "0";
            memset(g, 0, sizeof *g);
            strcpy(g->ecc_volatile, "0"); strcpy(g->ecc_aggregate, "0"); strcpy(g->remap, "0,0,0,0");
            strcpy(g->retired, "0"); strcpy(g->links, "-");
            while ((tok = strtok_r(NULL, " \t\n", &save))) {
                field(tok, "bus", g->bus, sizeof g->bus); field(tok, "uuid", g->uuid, sizeof g->uuid);
                field(tok, "name", g->name, sizeof g->name); field(tok, "remap", g->remap, sizeof g->remap);
                field(tok, "links", g->links, sizeof g->links);
                field(tok, "ecc_volatile", g->ecc_volatile, sizeof g->ecc_volatile);
                field(tok, "ecc_aggregate", g->ecc_aggregate, sizeof g->ecc_aggregate);
                field(tok, "retired_pending", g->retired, sizeof g->retired);
                field(tok, "lost", lost, sizeof lost);
            }
            for (char *c = g->name; *c; c++) if (*c == '_') *c = ' ';
            g->lost = atoi(lost);
        }
    }
    fclose(f);
}

/* The GPU behind a handle (index + 1), after the state is read again; NULL sets *ret. */
static gpu_t *device(void *handle, int *ret) {
    size_t i = (size_t)handle;
    load();
    if (!initialised) { *ret = UNINITIALIZED; return NULL; }
    if (i < 1 || i > (size_t)ngpus) { *ret = INVALID_ARGUMENT; return NULL; }
    if (gpus[i - 1].lost) { *ret = GPU_IS_LOST; return NULL; }
    *ret = OK;
    return &gpus[i - 1];
}

static int copy(char *out, unsigned int n, const char *s) {
    if (strlen(s) + 1 > n) return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    strcpy(out, s);
    return OK;
}

const char *nvmlErrorString(int r) {
    switch (r) {
    case OK: return "Success";
    case UNINITIALIZED: return "Uninitialized";
    case INVALID_ARGUMENT: return "Invalid Argument";
    case NOT_SUPPORTED: return "Not Supported";
    case 9: return "Driver Not Loaded";
    case GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

int nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    load();
    if (init_error) return init_error;
    initialised = 1;
    return OK;
}
int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
int nvmlShutdown(void) { initialised = 0; return OK; }

int nvmlSystemGetDriverVersion(char *out, unsigned int n) {
    load();
    return initialised ? copy(out, n, driver) : UNINITIALIZED;
}
int nvmlSystemGetNVMLVersion(char *out, unsigned int n) {
    load();
    return initialised ? copy(out, n, nvml_version) : UNINITIALIZED;
}

int nvmlDeviceGetCount_v2(unsigned int *count) {
    load();
    if (!initialised) return UNINITIALIZED;
    if (count_error) return count_error;
    *count = (unsigned int)ngpus;
    return OK;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **handle) {
    load();
    if (!initialised) return UNINITIALIZED;
    if (index >= (unsigned int)ngpus) return INVALID_ARGUMENT;
    *handle = (void *)(size_t)(index + 1);
    return OK;
}

int nvmlDeviceGetPciInfo_v3(void *h, pci_t *pci) {
    int r;
    gpu_t *g = device(h, &r);
    unsigned int domain = 0, bus = 0, dev = 0;
    if (!g) return r;
    memset(pci, 0, sizeof *pci);
    sscanf(g->bus, "%x:%x:%x", &domain, &bus, &dev);
    pci->domain = domain; pci->bus = bus; pci->device = dev; pci->pciDeviceId = 0x233010de;
    snprintf(pci->busId, sizeof pci->busId, "%.31s", g->bus);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%.15s", g->bus + (strlen(g->bus) > 12 ? 4 : 0));
    return OK;
}

int nvmlDeviceGetUUID(void *h, char *out, unsigned int n) {
    int r;
    gpu_t *g = device(h, &r);
    return g ? copy(out, n, g->uuid) : r;
}

int nvmlDeviceGetName(void *h, char *out, unsigned int n) {
    int r;
    gpu_t *g = device(h, &r);
    return g ? copy(out, n, g->name) : r;
}

/* errorType 1: uncorrected (corrected errors are always 0 here); counterType 0 volatile, 1 aggregate */
int nvmlDeviceGetTotalEccErrors(void *h, int errorType, int counterType, unsigned long long *count) {
    int r;
    gpu_t *g = device(h, &r);
    const char *v;
    if (!g) return r;
    v = counterType == 0 ? g->ecc_volatile : g->ecc_aggregate;
    if (!strcmp(v, "-")) return NOT_SUPPORTED;
    *count = errorType == 1 ? strtoull(v, NULL, 10) : 0;
    return OK;
}

int nvmlDeviceGetRemappedRows(void *h, unsigned int *corr, unsigned int *unc, unsigned int *pending,
                              unsigned int *failure) {
    int r;
    gpu_t *g = device(h, &r);
    if (!g) return r;
    if (!strcmp(g->remap, "-")) return NOT_SUPPORTED;
    if (sscanf(g->remap, "%u,%u,%u,%u", corr, unc, pending, failure) != 4) return UNKNOWN;
    return OK;
}

int nvmlDeviceGetRetiredPagesPendingStatus(void *h, int *pending) {
    int r;
    gpu_t *g = device(h, &r);
    if (!g) return r;
    if (!strcmp(g->retired, "-")) return NOT_SUPPORTED;
    *pending = atoi(g->retired); /* NVML_FEATURE_ENABLED = 1 */
    return OK;
}

int nvmlDeviceGetNvLinkState(void *h, unsigned int link, unsigned int *active) {
    int r, i = 0;
    gpu_t *g = device(h, &r);
    char links[128], *save = NULL, *tok;
    if (!g) return r;
    if (!strcmp(g->links, "-")) return NOT_SUPPORTED;
    if (link >= MAX_LINKS) return INVALID_ARGUMENT;
    snprintf(links, sizeof links, "%s", g->links);
    for (tok = strtok_r(links, ",", &save); tok; tok = strtok_r(NULL, ",", &save), i++) {
        if ((unsigned int)i == link) { *active = (unsigned int)atoi(tok); return OK; }
    }
    return INVALID_ARGUMENT; /* no such link on this GPU */
}
