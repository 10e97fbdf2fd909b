#define FUNCD_ARCHIVE_LAZY_IMPL
#include "artifact/archive_lazy.h"

#include <dlfcn.h>
#include <stdio.h>
#include <pthread.h>

#include "funcd/sys/error.h"

funcd_archive_api funcd__archive;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char load_error[256];

static void load(void)
{
    void *h = dlopen("libarchive.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(load_error, sizeof(load_error), "%s", e ? e : "dlopen failed");
        return;
    }
#define FUNCD_ARCHIVE_RESOLVE(name)                                                                \
    if (!load_error[0] && !(*(void **)&funcd__archive.name = dlsym(h, #name)))                     \
        snprintf(load_error, sizeof(load_error), "libarchive has no %s", #name);
    FUNCD_ARCHIVE_FUNCTIONS(FUNCD_ARCHIVE_RESOLVE)
#undef FUNCD_ARCHIVE_RESOLVE
    /* The handle stays open for the life of the process. */
}

int funcd__archive_load(void)
{
    pthread_once(&once, load);
    if (load_error[0])
        return funcd_error_set(FUNCD_EIO,
                               "cannot load libarchive for bundles and image layers: %s "
                               "(install libarchive13)",
                               load_error);
    return 0;
}
