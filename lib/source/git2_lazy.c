#define FUNCD_GIT2_LAZY_IMPL
#include "source/git2_lazy.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "funcd/sys/error.h"

funcd_git2_api funcd__git2;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char load_error[256];

static void load(void)
{
    void *h = dlopen("libgit2.so.1.5", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(load_error, sizeof(load_error), "%s", e ? e : "dlopen failed");
        return;
    }
#define FUNCD_GIT2_RESOLVE(name) \
    if (!load_error[0] && !(*(void **)&funcd__git2.name = dlsym(h, #name))) \
        snprintf(load_error, sizeof(load_error), "libgit2.so.1.5 has no %s", #name);
    FUNCD_GIT2_FUNCTIONS(FUNCD_GIT2_RESOLVE)
#undef FUNCD_GIT2_RESOLVE
    /* The handle stays open for the life of the process. */
}

int funcd__git2_load(void)
{
    pthread_once(&once, load);
    if (load_error[0])
        return funcd_error_set(FUNCD_EIO, "cannot load libgit2.so.1.5: %s (install libgit2-1.5)", load_error);
    return 0;
}
