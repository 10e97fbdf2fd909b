/*
 * libcurl, loaded on first use (like artifact/archive_lazy.h): an idle funcd
 * never touches it or the libraries it pulls in (a TLS stack among them),
 * which linked directly cost megabytes of resident memory. Include this
 * header after <curl/curl.h>; the names below then resolve through the
 * table, whose types come from the library's own prototypes.
 */
#ifndef FUNCD_OCI_CURL_LAZY_H
#define FUNCD_OCI_CURL_LAZY_H

#ifndef CURL_DISABLE_TYPECHECK
#define CURL_DISABLE_TYPECHECK /* its checking macros would hide the table */
#endif
#include <curl/curl.h>

#define FUNCD_CURL_FUNCTIONS(X) \
    X(curl_easy_cleanup) \
    X(curl_easy_escape) \
    X(curl_easy_getinfo) \
    X(curl_easy_init) \
    X(curl_easy_perform) \
    X(curl_easy_setopt) \
    X(curl_easy_strerror) \
    X(curl_free) \
    X(curl_global_cleanup) \
    X(curl_global_init) \
    X(curl_multi_add_handle) \
    X(curl_multi_assign) \
    X(curl_multi_cleanup) \
    X(curl_multi_info_read) \
    X(curl_multi_init) \
    X(curl_multi_remove_handle) \
    X(curl_multi_setopt) \
    X(curl_multi_socket_action) \
    X(curl_slist_append) \
    X(curl_slist_free_all)

typedef struct funcd_curl_api {
#define FUNCD_CURL_SLOT(name) __typeof__(name) *name;
    FUNCD_CURL_FUNCTIONS(FUNCD_CURL_SLOT)
#undef FUNCD_CURL_SLOT
} funcd_curl_api;

extern funcd_curl_api funcd__curl;

/* Loads the library once (thread-safe). 0, or FUNCD_EIO naming what failed. */
int funcd__curl_load(void);

#ifndef FUNCD_CURL_LAZY_IMPL
/* curl.h's argument-count checks (function-like macros) give way to the table. */
#undef curl_easy_setopt
#undef curl_easy_getinfo
#undef curl_multi_setopt
#define curl_easy_cleanup (funcd__curl.curl_easy_cleanup)
#define curl_easy_escape (funcd__curl.curl_easy_escape)
#define curl_easy_getinfo (funcd__curl.curl_easy_getinfo)
#define curl_easy_init (funcd__curl.curl_easy_init)
#define curl_easy_perform (funcd__curl.curl_easy_perform)
#define curl_easy_setopt (funcd__curl.curl_easy_setopt)
#define curl_easy_strerror (funcd__curl.curl_easy_strerror)
#define curl_free (funcd__curl.curl_free)
#define curl_global_cleanup (funcd__curl.curl_global_cleanup)
#define curl_global_init (funcd__curl.curl_global_init)
#define curl_multi_add_handle (funcd__curl.curl_multi_add_handle)
#define curl_multi_assign (funcd__curl.curl_multi_assign)
#define curl_multi_cleanup (funcd__curl.curl_multi_cleanup)
#define curl_multi_info_read (funcd__curl.curl_multi_info_read)
#define curl_multi_init (funcd__curl.curl_multi_init)
#define curl_multi_remove_handle (funcd__curl.curl_multi_remove_handle)
#define curl_multi_setopt (funcd__curl.curl_multi_setopt)
#define curl_multi_socket_action (funcd__curl.curl_multi_socket_action)
#define curl_slist_append (funcd__curl.curl_slist_append)
#define curl_slist_free_all (funcd__curl.curl_slist_free_all)
#endif

#endif
