#define FUNCD_CURL_LAZY_IMPL
#include "oci/curl_lazy.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "funcd/sys/error.h"

funcd_curl_api funcd__curl;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char load_error[256];

static void load(void)
{
    void *h = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(load_error, sizeof(load_error), "%s", e ? e : "dlopen failed");
        return;
    }
#define FUNCD_CURL_RESOLVE(name) \
    if (!load_error[0] && !(*(void **)&funcd__curl.name = dlsym(h, #name))) \
        snprintf(load_error, sizeof(load_error), "libcurl.so.4 has no %s", #name);
    FUNCD_CURL_FUNCTIONS(FUNCD_CURL_RESOLVE)
#undef FUNCD_CURL_RESOLVE
    /* The handle stays open for the life of the process. */
}

int funcd__curl_load(void)
{
    pthread_once(&once, load);
    if (load_error[0])
        return funcd_error_set(FUNCD_EIO, "cannot load libcurl.so.4: %s (install libcurl4)", load_error);
    return 0;
}
