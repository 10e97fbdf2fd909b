/*
 * libgit2, loaded on first use (like artifact/archive_lazy.h): an idle funcd
 * never touches it or the libraries it pulls in (a TLS stack among them),
 * which linked directly cost megabytes of resident memory. Include this
 * header after <git2.h>; the names below then resolve through the
 * table, whose types come from the library's own prototypes.
 */
#ifndef FUNCD_SOURCE_GIT2_LAZY_H
#define FUNCD_SOURCE_GIT2_LAZY_H

#include <git2.h>
#include <git2/sys/stream.h> /* git_stream_register: funcd's socket stream (git.c) */

#define FUNCD_GIT2_FUNCTIONS(X) \
    X(git_blob_free) \
    X(git_blob_lookup) \
    X(git_blob_rawcontent) \
    X(git_blob_rawsize) \
    X(git_commit_free) \
    X(git_commit_lookup) \
    X(git_commit_tree) \
    X(git_config_free) \
    X(git_config_set_string) \
    X(git_error_last) \
    X(git_error_set_oom) \
    X(git_error_set_str) \
    X(git_fetch_options_init) \
    X(git_libgit2_init) \
    X(git_libgit2_shutdown) \
    X(git_object_free) \
    X(git_object_id) \
    X(git_object_lookup) \
    X(git_object_lookup_prefix) \
    X(git_object_peel) \
    X(git_odb_free) \
    X(git_odb_read_header) \
    X(git_oid_cpy) \
    X(git_oid_equal) \
    X(git_oid_fromstr) \
    X(git_oid_fromstrn) \
    X(git_oid_tostr) \
    X(git_reference_name_to_id) \
    X(git_remote_connect) \
    X(git_remote_create_options_init) \
    X(git_remote_create_with_opts) \
    X(git_remote_fetch) \
    X(git_remote_free) \
    X(git_remote_init_callbacks) \
    X(git_remote_ls) \
    X(git_repository_config) \
    X(git_repository_free) \
    X(git_repository_init) \
    X(git_repository_odb) \
    X(git_repository_open_bare) \
    X(git_stream_register) \
    X(git_tree_entry_byindex) \
    X(git_tree_entry_filemode) \
    X(git_tree_entry_id) \
    X(git_tree_entry_name) \
    X(git_tree_entrycount) \
    X(git_tree_free) \
    X(git_tree_lookup)

typedef struct funcd_git2_api {
#define FUNCD_GIT2_SLOT(name) __typeof__(name) *name;
    FUNCD_GIT2_FUNCTIONS(FUNCD_GIT2_SLOT)
#undef FUNCD_GIT2_SLOT
} funcd_git2_api;

extern funcd_git2_api funcd__git2;

/* Loads the library once (thread-safe). 0, or FUNCD_EIO naming what failed. */
int funcd__git2_load(void);

#ifndef FUNCD_GIT2_LAZY_IMPL
#define git_blob_free (funcd__git2.git_blob_free)
#define git_blob_lookup (funcd__git2.git_blob_lookup)
#define git_blob_rawcontent (funcd__git2.git_blob_rawcontent)
#define git_blob_rawsize (funcd__git2.git_blob_rawsize)
#define git_commit_free (funcd__git2.git_commit_free)
#define git_commit_lookup (funcd__git2.git_commit_lookup)
#define git_commit_tree (funcd__git2.git_commit_tree)
#define git_config_free (funcd__git2.git_config_free)
#define git_config_set_string (funcd__git2.git_config_set_string)
#define git_error_last (funcd__git2.git_error_last)
#define git_error_set_oom (funcd__git2.git_error_set_oom)
#define git_error_set_str (funcd__git2.git_error_set_str)
#define git_fetch_options_init (funcd__git2.git_fetch_options_init)
#define git_libgit2_init (funcd__git2.git_libgit2_init)
#define git_libgit2_shutdown (funcd__git2.git_libgit2_shutdown)
#define git_object_free (funcd__git2.git_object_free)
#define git_object_id (funcd__git2.git_object_id)
#define git_object_lookup (funcd__git2.git_object_lookup)
#define git_object_lookup_prefix (funcd__git2.git_object_lookup_prefix)
#define git_object_peel (funcd__git2.git_object_peel)
#define git_odb_free (funcd__git2.git_odb_free)
#define git_odb_read_header (funcd__git2.git_odb_read_header)
#define git_oid_cpy (funcd__git2.git_oid_cpy)
#define git_oid_equal (funcd__git2.git_oid_equal)
#define git_oid_fromstr (funcd__git2.git_oid_fromstr)
#define git_oid_fromstrn (funcd__git2.git_oid_fromstrn)
#define git_oid_tostr (funcd__git2.git_oid_tostr)
#define git_reference_name_to_id (funcd__git2.git_reference_name_to_id)
#define git_remote_connect (funcd__git2.git_remote_connect)
#define git_remote_create_options_init (funcd__git2.git_remote_create_options_init)
#define git_remote_create_with_opts (funcd__git2.git_remote_create_with_opts)
#define git_remote_fetch (funcd__git2.git_remote_fetch)
#define git_remote_free (funcd__git2.git_remote_free)
#define git_remote_init_callbacks (funcd__git2.git_remote_init_callbacks)
#define git_remote_ls (funcd__git2.git_remote_ls)
#define git_repository_config (funcd__git2.git_repository_config)
#define git_repository_free (funcd__git2.git_repository_free)
#define git_repository_init (funcd__git2.git_repository_init)
#define git_repository_odb (funcd__git2.git_repository_odb)
#define git_repository_open_bare (funcd__git2.git_repository_open_bare)
#define git_stream_register (funcd__git2.git_stream_register)
#define git_tree_entry_byindex (funcd__git2.git_tree_entry_byindex)
#define git_tree_entry_filemode (funcd__git2.git_tree_entry_filemode)
#define git_tree_entry_id (funcd__git2.git_tree_entry_id)
#define git_tree_entry_name (funcd__git2.git_tree_entry_name)
#define git_tree_entrycount (funcd__git2.git_tree_entrycount)
#define git_tree_free (funcd__git2.git_tree_free)
#define git_tree_lookup (funcd__git2.git_tree_lookup)
#endif

#endif
